#!/usr/bin/env bash
# How fast a rank slowed by a CPU limit is named a straggler, on both routes (docs/progress.md, stragglers):
# tests/cluster/straggler_test.sh's throttled scenarios (two namespace nodes, one Gloo rank each, equal work,
# then rank 0's worker limited to half a core by a CPU cgroup while it runs), TRIALS times per route; prints
# each trial and the min / median / max seconds from the limit to the first straggler line. Root. Not part of
# ctest.
#   bench/faults/straggler_throttle.sh        (env TRIALS=10 ROUTES="throttled throttled_beats", MESHRUN)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MESHRUN=${MESHRUN:-$ROOT/build/bin/meshrun}
TRIALS=${TRIALS:-10}
ROUTES=${ROUTES:-throttled throttled_beats}
echo "# bench/faults/straggler_throttle.sh $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, TRIALS=$TRIALS"
for route in $ROUTES; do
  times=()
  for n in $(seq "$TRIALS"); do
    out=$("$ROOT/tests/cluster/straggler_test.sh" "$route" "$MESHRUN" "$ROOT/.venv/bin" 2>&1)
    t=$(echo "$out" | sed -n 's/^THROTTLED .*named \([0-9.]*\) s after its limit$/\1/p')
    ok=$(echo "$out" | tail -1)
    echo "$route $n: ${t:-not named} ($ok)"
    [ -n "$t" ] && times+=("$t")
  done
  printf '%s\n' "${times[@]}" | sort -g | awk -v r="$route" -v n="$TRIALS" '
    { v[NR] = $1 } END { if (NR) printf "%s: named %d/%d, min / median / max %.1f / %.1f / %.1f s\n", r, NR, n, v[1], v[int((NR + 1) / 2)], v[NR]; else print r ": never named" }'
done
