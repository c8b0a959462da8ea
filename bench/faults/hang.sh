#!/bin/bash
# Hang verdicts with no code in the script (docs/progress.md), on two nodes (network namespaces, two PyTorch
# Gloo ranks each; root). Not part of ctest. Per fault class (spin with --hang-busy-timeout 10: a busy rank is
# only late without it), TRIALS trials with --hang-floor 3 and
# DEFAULT_TRIALS on the defaults (auto, floor 60 s): correct verdicts x/N and the seconds from the fault
# (the culprit's own clock, tests/cluster/hang_job.py) to the verdict line on the first node that printed
# it. Then torchrun on the same fault: what it has printed after the same wall time. Then the hook's cost per
# step: STEPS steps with the hook (default) and without (--hang-timeout off), REPEATS runs each.
# The hook run includes the daemon's arrival probes (stragglers from arrival times) every 3 s.
#   bench/faults/hang.sh                   (env TRIALS=10 DEFAULT_TRIALS=3 STEPS=400 REPEATS=3
#                                        PARTS="verdicts torchrun cost": the sections to run,
#                                        CLASSES="skip stop spin mismatch subgroup defaults": the fault classes;
#                                        also stopremote, stopremote_defaults: rank 2 on node1 stopped 3 s after
#                                        node0's ranks began waiting, floor 6 s or the defaults)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MESHRUN=${MESHRUN:-$ROOT/build/bin/meshrun}
VENV_BIN=$ROOT/.venv/bin
JOB=$ROOT/tests/cluster/hang_job.py
TRIALS=${TRIALS:-10} DEFAULT_TRIALS=${DEFAULT_TRIALS:-3} STEPS=${STEPS:-400} REPEATS=${REPEATS:-3}
PARTS=" ${PARTS:-verdicts torchrun cost} "
part() { [[ "$PARTS" == *" $1 "* ]]; }
source "$ROOT/tests/cluster/cluster.sh"
mc_init 2
W=$MC_DIR/bench; mkdir -p "$W"
PORT=29641
STEP=20

# run_pair NAME ARGS...: one meshrun per node on a fresh output folder $W/NAME; waits for both to exit.
run_pair() {
  local name=$1 i; shift
  rm -rf "${W:?}/$name"; mkdir -p "$W/$name/out"
  for i in 0 1; do
    mc_spawn "$i" "$W/$name/node$i.log" env PATH="$VENV_BIN:$PATH" "$MESHRUN" --rdzv-backend c10d \
      --rdzv-endpoint "node0:$PORT" --rdzv-id "$name" --nnodes 2 --nproc-per-node 2 --max-restarts 0 "$@"
    eval "P$i=$MC_PID"
  done
  local first=""
  for _ in $(seq 3000); do   # the verdict's time: the first node to print it (0.1 s resolution)
    if [ -z "$first" ] && grep -qh "^meshrun: hang: " "$W/$name"/node?.log 2> /dev/null; then first=$(mc_now); fi
    kill -0 "$P0" 2> /dev/null || kill -0 "$P1" 2> /dev/null || break
    sleep 0.1
  done
  echo "${first:-0}" > "$W/$name/verdict_at"
}

# expected FAULT: the regex a correct verdict matches (culprits as in tests/cluster/hang_test.sh).
expected() {
  local seq=$((STEP + 1))
  case $1 in
    skip) echo "rank 3 \(node1, local rank 1, pid [0-9]+\) never entered all_reduce #$seq of group 0" ;;
    stop) echo "rank 0 \(node0, local rank 0, pid [0-9]+\) is stopped by a signal" ;;
    spin) echo "rank 2 \(node1, local rank 0, pid [0-9]+\) has kept ranks 0,1,3 waiting in all_reduce #$seq of group 0 \(ranks 0-3\) for [0-9]+ s, past --hang-busy-timeout" ;;
    mismatch) echo "ranks disagree at #$seq of group 0 \(ranks 0-3\): rank 1 called broadcast" ;;
    subgroup) echo "rank 3 \(node1, local rank 1, pid [0-9]+\) never entered all_reduce #$seq of group 2" ;;
    defaults) echo "rank 0 \(node0, local rank 0, pid [0-9]+\) never entered all_reduce #$((STEP + 41)) of group 0" ;;
    stopremote*) echo "rank 2 \(node1, local rank 0, pid [0-9]+\) is stopped by a signal \(state T\); ranks 0,1,3 wait in all_reduce #$seq of group 0" ;;
  esac
}
culprit() {
  case $1 in skip | subgroup) echo 3 ;; stop | defaults) echo 0 ;; spin | stopremote*) echo 2 ;; mismatch) echo 1 ;; esac
}

trial() {   # trial CLASS N: prints "ok|wrong SECONDS"
  local class=$1 n=$2 name="$1-$2" fault=$1 floor=(--hang-floor 3)
  [ "$class" = defaults ] && { fault=pause_skip; floor=(); }
  # Rank 2 (node1) stops itself 3 s after node0's ranks began waiting for it: node0 suspects first.
  [ "$class" = stopremote ] && { fault=stoplate; floor=(--hang-floor 6); }
  [ "$class" = stopremote_defaults ] && { fault=stoplate; floor=(); }
  # A spinning rank is busy: late, not hung (docs/progress.md#stuck-or-busy), until --hang-busy-timeout.
  [ "$class" = spin ] && floor+=(--hang-busy-timeout 10)
  run_pair "$name" "${floor[@]}" "$JOB" "$W/$name/out" "$fault" "$(culprit "$class")" $STEP
  local at; at=$(cat "$W/$name/verdict_at"); local fault_at; fault_at=$(cat "$W/$name/out/fault" 2> /dev/null || echo 0)
  local verdict=wrong
  grep -Eq "^meshrun: hang: $(expected "$class")" "$W/$name/node0.log" &&
    grep -Eq "^meshrun: hang: $(expected "$class")" "$W/$name/node1.log" && verdict=ok
  awk -v v=$verdict -v a="$at" -v f="$fault_at" 'BEGIN { printf "%s %.1f\n", v, (a > 0 && f > 0) ? a - f : -1 }'
}

part verdicts && echo "== verdicts: fault class, correct/N, seconds from the fault to the verdict (min / median / max)"
part verdicts && for class in ${CLASSES:-skip stop spin mismatch subgroup defaults}; do
  n=$TRIALS; [[ "$class" == *defaults ]] && n=$DEFAULT_TRIALS
  : > "$W/$class.results"
  for t in $(seq "$n"); do trial "$class" "$t" >> "$W/$class.results"; done
  ok=$(grep -c '^ok' "$W/$class.results")
  sort -n -k2 "$W/$class.results" | awk -v c="$class" -v ok="$ok" '{ t[NR] = $2 } END {
    printf "%-9s %d/%d correct; fault -> verdict %.1f / %.1f / %.1f s\n", c, ok, NR, t[1], t[int((NR + 1) / 2)], t[NR] }'
done

if part torchrun; then
echo "== torchrun, the same fault (skip), after the same wall time as meshrun's slowest skip verdict"
wait_s=$(sort -n -k2 "$W/skip.results" | tail -1 | awk '{ printf "%d", $2 + 5 }')
wait_s=${wait_s:-20}   # no verdict trials in this run
rm -rf "$W/torchrun"; mkdir -p "$W/torchrun/out"
for i in 0 1; do
  mc_spawn "$i" "$W/torchrun/node$i.log" "$VENV_BIN/torchrun" --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d \
    --rdzv-endpoint "node0:$((PORT + 1))" --rdzv-id tr "$JOB" "$W/torchrun/out" skip 3 $STEP
done
for _ in $(seq 600); do [ -f "$W/torchrun/out/fault" ] && break; sleep 0.1; done
sleep "$wait_s"
echo "torchrun, ${wait_s} s after the fault: $(cat "$W/torchrun"/node?.log | grep -vc '^\s*$') lines of output, $(cat "$W/torchrun"/node?.log | grep -iEc 'hang|timeout|rank 3') about a hang, a timeout or rank 3; workers still running: $(pgrep -fc "python.*hang_job.py $W/torchrun")"
for p in $(ip netns pids "$(mc_ns 0)") $(ip netns pids "$(mc_ns 1)"); do kill -9 "$p" 2> /dev/null; done
fi

part cost || exit 0
echo "== the hook's cost per step: $STEPS steps (matmul + all_reduce + 20 ms sleep), $REPEATS runs each"
for r in $(seq "$REPEATS"); do
  for mode in hook off; do
    extra=(); [ $mode = off ] && extra=(--hang-timeout off)
    run_pair "cost-$mode-$r" "${extra[@]}" "$JOB" "$W/cost-$mode-$r/out" none -1 -1 "$STEPS"
    cat "$W/cost-$mode-$r/out"/done.* | awk -v m=$mode '{ s += $1 } END { printf "%s %.4f\n", m, s / NR }' >> "$W/cost.results"
  done
done
awk '{ t[$1] += $2; n[$1]++ } END { h = t["hook"] / n["hook"]; o = t["off"] / n["off"];
  printf "loop seconds, mean over ranks and runs: hook %.3f s, off %.3f s: %+.2f %% per step\n", h, o, (h / o - 1) * 100 }' "$W/cost.results"
