#!/usr/bin/env bash
# What the straggler route without beats costs a Python job (docs/progress.md, "Stragglers from arrival
# times"): every 2 s each rank's hook reads its Flight Recorder to answer the daemon's arrival probe. The same
# 2-rank Gloo job (bench/faults/probe_cost_job.py: fixed pure-Python work per step, the GIL held, two
# all-reduces) under meshrun --standalone, alternately with the alert on (the default: probes) and off
# (--straggler-threshold 0: no probes), ROUNDS times each, in alternating order; prints each run's loop
# seconds, the medians and their ratio. Not part of ctest.
#   bench/faults/probe_cost.sh        (env ROUNDS=3 STEPS=1500 ITERATIONS=20000, MESHRUN)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MESHRUN=${MESHRUN:-$ROOT/build/bin/meshrun}
ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-1500} ITERATIONS=${ITERATIONS:-20000}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
echo "# bench/faults/probe_cost.sh $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, ROUNDS=$ROUNDS STEPS=$STEPS ITERATIONS=$ITERATIONS"
[ "$ROUNDS" -ge 1 ] 2> /dev/null || { echo "ROUNDS=$ROUNDS: expected a whole number of rounds, 1 or more"; exit 2; }
for n in $(seq "$ROUNDS"); do
  order="on off"; [ $((n % 2)) = 0 ] && order="off on"  # neither mode always runs first
  for mode in $order; do
    rm -f "$W/took"
    flag=(); [ "$mode" = off ] && flag=(--straggler-threshold 0)
    PATH="$ROOT/.venv/bin:$PATH" "$MESHRUN" --standalone --nproc-per-node 2 "${flag[@]}" \
      "$ROOT/bench/faults/probe_cost_job.py" "$W/took" "$STEPS" "$ITERATIONS" > "$W/log" 2>&1 ||
      { echo "the job failed (alert $mode):"; cat "$W/log"; exit 1; }
    echo "$mode $(cat "$W/took")" | tee -a "$W/all"
  done
done
median() { grep "^$1 " "$W/all" | awk '{ print $2 }' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
on=$(median on) off=$(median off)
awk -v on="$on" -v off="$off" 'BEGIN { printf "probes on: median %.2f s; off: %.2f s; on / off = %.3f\n", on, off, on / off }'
