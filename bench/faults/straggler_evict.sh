#!/usr/bin/env bash
# A slow node replaced by a hot spare (docs/multi-node.md, slow nodes): the job's own steps per second over time, by
# its own clock, in four modes side by side, TRIALS times each. Four namespace nodes (three seats and a spare; the
# spare is idle under torchrun), one Gloo rank each of tests/cluster/straggler_job.py (equal work per step, beats
# with ROUTE=beats, none with ROUTE=arrivals; rank 0 logs "UNIX_TIME STEPS" every 50 steps). LIMIT_AT seconds into
# the job, node1's worker is limited to PERCENT % of a core by a CPU cgroup (not in `healthy`); the job ends
# DURATION seconds after its first start, restarts included.
#   healthy    meshrun --replace-slow-nodes with the spare, nothing limited: the job's healthy rate (and no eviction)
#   throttled  meshrun without the flag, node1 limited: the rate it keeps
#   evict      meshrun --replace-slow-nodes, node1 limited: the eviction, and the rate after it
#   torchrun   torchrun (c10d rendezvous on node0), node1 limited
# For each trial: the rate before the limit, the rate 60-90 s and 90 s-end after it, each over the healthy rate, and
# the seconds from the limit until the rate is back to 90 % of the healthy rate and stays (evict); then the medians.
# Root. Not part of ctest.
#   bench/faults/straggler_evict.sh     (env TRIALS=5 MODES="healthy throttled evict torchrun" DURATION=180
#                                        LIMIT_AT=40 PERCENT=33 ROUTE=beats MESHRUN; KEEP=1 keeps the node logs)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MESHRUN=${MESHRUN:-$ROOT/build/bin/meshrun}
VENV_BIN=$ROOT/.venv/bin
TRIALS=${TRIALS:-5} MODES=${MODES:-healthy throttled evict torchrun}
DURATION=${DURATION:-180} LIMIT_AT=${LIMIT_AT:-40} PERCENT=${PERCENT:-33} ROUTE=${ROUTE:-beats}

one() {   # one MODE RESULT_FILE: a run in fresh namespace nodes; writes "MODE LIMIT_UNIX EVICTED" and the rate log
  local mode=$1 result=$2 i
  source "$ROOT/tests/cluster/cluster.sh"
  mc_init 4
  local W=$MC_DIR/work PORT=29671 RUN=evict$$ JOB
  mkdir -p "$W/out"
  JOB=("$ROOT/tests/cluster/straggler_job.py" "$W/out" 100000000 40 --work --for-job="$DURATION" --rate-log="$W/rate.log"
       --rate-every=10)
  [ "$ROUTE" = beats ] && JOB+=(--beats)
  local flags=(--rdzv-backend c10d --rdzv-endpoint "node0:$PORT" --rdzv-id "$RUN" --nnodes 3 --nproc-per-node 1
               --max-restarts 3 --standby-start now)
  [ "$mode" = throttled ] || flags+=(--replace-slow-nodes)
  for i in 0 1 2; do
    if [ "$mode" = torchrun ]; then
      mc_spawn "$i" "$W/node$i.log" env PATH="$VENV_BIN:$PATH" "$VENV_BIN/python" -m torch.distributed.run \
        --nnodes 3 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "node0:$PORT" --rdzv-id "$RUN" \
        --max-restarts 3 "${JOB[@]}"
    else
      mc_spawn "$i" "$W/node$i.log" env PATH="$VENV_BIN:$PATH" "$MESHRUN" "${flags[@]}" "${JOB[@]}"
    fi
  done
  [ "$mode" = torchrun ] || { sleep 5; mc_spawn 3 "$W/node3.log" env PATH="$VENV_BIN:$PATH" "$MESHRUN" "${flags[@]}" "${JOB[@]}"; }
  for _ in $(seq 1200); do [ -s "$W/out/started" ] && break; sleep 0.1; done
  local started; started=$(cat "$W/out/started" 2> /dev/null || date +%s)
  sleep "$(awk -v s="$started" -v at="$LIMIT_AT" -v now="$(date +%s.%N)" 'BEGIN { d = s + at - now; print (d > 0 ? d : 0) }')"
  local limit=0 worker
  if [ "$mode" != healthy ]; then
    # The worker, not torchrun's agent (itself a python whose command line names the script).
    worker=$(mc_worker_pid 1 "python[0-9.]* -u .*straggler_job.py") && mc_cpu_limit "$worker" "$PERCENT" &&
      limit=$(date +%s.%N)
    [ "$limit" = 0 ] && echo "could not limit node1's worker" >&2
  fi
  # When node0's agent first names the straggler and first says the eviction, by the wall clock (its lines carry none).
  local named=0 evicted_at=0
  for _ in $(seq $((DURATION * 10 + 1200))); do
    [ "$(mc_count_files "$W/out" '^done\.')" -ge 3 ] && break
    [ "$named" = 0 ] && grep -q "^meshrun: straggler: rank 1 " "$W/node0.log" && named=$(date +%s.%N)
    [ "$evicted_at" = 0 ] && grep -q "evicted for a spare" "$W/node0.log" && evicted_at=$(date +%s.%N)
    sleep 0.1
  done
  sleep 2
  local evicted=0
  grep -q "evicted for a spare" "$W/node0.log" && evicted=1
  { echo "$mode $started $limit $evicted $named $evicted_at"; cat "$W/rate.log"; } > "$result"
  grep -h "evicted for a spare" "$W/node0.log" | head -1 >&2
  local i; for i in 0 1 2 3; do [ -f "$W/node$i.log" ] && cp "$W/node$i.log" "$result.node$i.log"; done
}

if [ "${1:-}" = one ]; then one "$2" "$3"; exit; fi

echo "# bench/faults/straggler_evict.sh $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, TRIALS=$TRIALS DURATION=$DURATION" \
     "LIMIT_AT=$LIMIT_AT PERCENT=$PERCENT ROUTE=$ROUTE"
RESULTS=$(mktemp -d)
for n in $(seq "$TRIALS"); do
  for mode in $MODES; do "$0" one "$mode" "$RESULTS/$mode.$n" > "$RESULTS/$mode.$n.out" 2>&1; done
done
"$VENV_BIN/python" - "$RESULTS" "$TRIALS" $MODES << 'PY'
import statistics, sys
results, trials, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def bins(lines, start):  # steps per second in 10 s bins from the job's start (a restart's steps start again at 0)
    steps_in, last = {}, None
    for t, steps in lines:
        if last and steps > last[1]:  # the steps between two lines, spread over the time between them
            a, b = last[0], t
            per_s = (steps - last[1]) / (b - a)
            while a < b:
                edge = min(b, start + (int((a - start) // 10) + 1) * 10)
                k = int((a - start) // 10)
                steps_in[k] = steps_in.get(k, 0) + per_s * (edge - a)
                a = edge
        last = (t, steps)
    return {k: v / 10 for k, v in steps_in.items()}

def read(mode, n):
    try:
        head, *rest = open(f"{results}/{mode}.{n}").read().split("\n")
    except OSError:
        return None
    _, started, limit, evicted, named, evicted_at = head.split()
    lines = [tuple(map(float, l.split())) for l in rest if l.strip()]
    return (float(started), float(limit), evicted == "1", bins(lines, float(started)),
            float(named), float(evicted_at))

healthy = []
for n in range(1, trials + 1):
    r = read("healthy", n)
    if r:
        rates = r[3]
        healthy += [v for b, v in rates.items() if 1 <= b and b + 1 < max(rates)]
base = statistics.median(healthy) if healthy else float("nan")
print(f"healthy rate: {base:.1f} steps/s (median 10 s bin over the healthy runs)")
summary = {}
for mode in modes:
    for n in range(1, trials + 1):
        r = read(mode, n)
        if not r:
            print(f"{mode} {n}: no result")
            continue
        started, limit, evicted, rates, named, evicted_at = r
        at = (limit - started) if limit else 40
        first = int(at // 10) + 1  # the first bin wholly after the limit
        def over(a, b):
            vals = [v for k, v in rates.items() if first + a // 10 <= k < first + b // 10]
            return statistics.median(vals) / base if vals else float("nan")
        last_bin = max(rates) - 1
        back = next((k for k in range(first, last_bin + 1)
                     if all(rates.get(j, 0) >= 0.9 * base for j in range(k, last_bin + 1))), None) if limit else None
        # The start of the first bin from which every bin is back: the rate was back by then.
        back_s = back * 10 - at if back is not None else None
        since = lambda t: f"{t - limit:.0f} s" if t and limit else "-"
        before = [v for k, v in rates.items() if 1 <= k < int(at // 10)]
        line = (f"{mode} {n}: before {statistics.median(before) / base if before else float('nan'):.2f}x, "
                f"60-90 s after {over(60, 90):.2f}x, 90 s-end {over(90, 10000):.2f}x of healthy; "
                f"named {since(named)}, evicted {since(evicted_at) if evicted else 'no'} after the limit; back to 90 % "
                + (f"{back_s:.0f} s after the limit" if back_s is not None else "never" if limit else "-"))
        print(line)
        summary.setdefault(mode, []).append((over(60, 90), over(90, 10000), back_s, evicted, limit))
for mode, rows in summary.items():
    med = lambda i: statistics.median([r[i] for r in rows if r[i] == r[i]]) if rows else float("nan")
    backs = [r[2] for r in rows if r[2] is not None]
    # The median over every trial, "never" counting as longer than any.
    ordered = sorted(rows, key=lambda r: float("inf") if r[2] is None else r[2])
    mid = ordered[(len(ordered) - 1) // 2][2] if ordered else None
    evictions = sum(1 for r in rows if r[3])
    back = (f"back to 90 % in {len(backs)}/{len(rows)} trials, median " + (f"{mid:.0f} s" if mid is not None else "never")
            if any(r[4] for r in rows) else "nothing limited")
    print(f"{mode}: median 60-90 s after the limit {med(0):.2f}x, after 90 s {med(1):.2f}x of healthy; evicted in "
          f"{evictions}/{len(rows)} trials; {back}")
PY
if [ -n "${KEEP:-}" ]; then echo "logs kept in $RESULTS"; else rm -rf "$RESULTS"; fi
