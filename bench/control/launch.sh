#!/usr/bin/env bash
# Launch overhead: meshrun vs torchrun for `--standalone --nproc-per-node P --no-python /bin/true`.
# Prints the median wall time of RUNS runs per launcher and P, and the ratio. Not part of ctest.
#   bench/control/launch.sh [RUNS]        (default 10; env MESHRUN, TORCHRUN override the binaries)
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
runs="${1:-10}"
meshrun="${MESHRUN:-$here/build/bin/meshrun}"
torchrun="${TORCHRUN:-$here/.venv/bin/torchrun}"
[[ -x "$meshrun" ]] || { echo "no $meshrun: build it first (cmake --build build --target meshrun)" >&2; exit 2; }
[[ -x "$torchrun" ]] || { echo "no $torchrun: run scripts/setup.sh" >&2; exit 2; }

# Median wall time in milliseconds of "$@" over $runs runs (output discarded; a failing run aborts).
median_ms() {
  local times=()
  for ((i = 0; i < runs; i++)); do
    local t0 t1
    t0=$(date +%s%N)
    "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }
    t1=$(date +%s%N)
    times+=($(((t1 - t0) / 1000)))
  done
  printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {m = (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2; printf "%.2f", m / 1000}'
}

# Time from launch until all P workers run: each worker touches a file; the last one's mtime minus the start.
ready_ms() {
  local p="$1" dir
  dir="$(mktemp -d)"
  local t0
  t0=$(date +%s%N)
  "$meshrun" --standalone --nproc-per-node "$p" --no-python /bin/sh -c "touch $dir/\$RANK" >/dev/null 2>&1
  local last
  last=$(stat -c '%.9Y' "$dir"/* | sort -n | tail -1 | tr -d .)
  rm -rf "$dir"
  awk -v a="$t0" -v b="$last" 'BEGIN {printf "%.2f", (b - a) / 1e6}'
}

echo "# launch overhead: --standalone --nproc-per-node P --no-python /bin/true, median of $runs runs"
echo "# meshrun:  $meshrun"
echo "# torchrun: $torchrun"
printf '%4s %14s %14s %10s %18s\n' P meshrun_ms torchrun_ms speedup meshrun_ready_ms
for p in 1 4 16; do
  m=$(median_ms "$meshrun" --standalone --nproc-per-node "$p" --no-python /bin/true)
  t=$(median_ms "$torchrun" --standalone --nproc-per-node "$p" --no-python /bin/true)
  r=$(ready_ms "$p")
  printf '%4s %14s %14s %9.1fx %18s\n' "$p" "$m" "$t" "$(awk -v a="$t" -v b="$m" 'BEGIN {print a / b}')" "$r"
done
