#!/bin/bash
# Recovery with hot spares: meshrun-trainer (tiny config, one rank per node, checkpoints every 10 steps) on
# 4 agent nodes with --nnodes 2:3 (three train, the fourth waits as a spare) and meshrun-rendezvous on a
# fifth node outside the job. One scenario per run; no timing is asserted, only behaviour:
#   spare      node rank 1's whole node is killed -9 (agent, workers): the spare takes node rank 1 at once,
#              the job keeps its size (3), every survivor prints the restart's recovery ledger, the
#              daemon's status has it complete, the final loss equals a run without a fault, and every
#              node that finished prints the run's goodput ledger with its one restart
#   rank0      the same for node rank 0 (it hosts rank 0 of the workers and writes the metrics)
#   linkcut    node rank 2's link is cut: declared dead after its keep-alive, the spare takes its rank,
#              the cut-off agent stops, naming the rendezvous it lost
#   twofaults  node rank 1 is killed, then, once the spare trains, node rank 2: the first fault keeps the
#              size (the spare), the second continues at 2 nodes (no spare left, --nnodes 2:3)
#   sparedies  the spare's node is killed before any fault, then node rank 1: no spare is left, the job
#              continues at 2 nodes
# Each scenario checks that no process of the job is left on any node.
# Usage: recovery_test.sh SCENARIO MESHRUN RENDEZVOUS TRAINER CONFIG_DIR  (root; exits 77 without namespaces)
SCENARIO=$1 MESHRUN=$2 RDZV=$3 TRAINER=$4 CONFIGS=$5
source "$(dirname "$0")/cluster.sh"
source "$(dirname "$0")/trainer_steps.sh"
mc_init 5
W=$MC_DIR/work; mkdir -p "$W"; cd "$W" || exit 1
chmod 777 "$W"
PORT=29712 DAEMON=4 STEPS=150
MARKER="MC_JOB=recovery$$"
declare -a A   # agent pid per node (expect_exit reads it)

mc_spawn "$DAEMON" "$W/daemon.log" "$RDZV" --host 0.0.0.0 --port "$PORT"
for _ in $(seq 100); do grep -q "listening" "$W/daemon.log" && break; sleep 0.1; done

# agent I RUN OUT: meshrun-trainer under meshrun on node I, in run RUN, writing to OUT; log in $W/node<I>.log.
agent() {
  mc_spawn "$1" "$W/node$1.log" env "$MARKER" OMP_NUM_THREADS=1 "${HOLD[@]}" "$MESHRUN" --rdzv-backend c10d \
    --rdzv-endpoint "node$DAEMON:$PORT" --rdzv-id "$2" --nnodes 2:3 --nproc-per-node 1 --max-restarts 3 \
    --log-level info --no-python "$TRAINER" \
    --config "$CONFIGS/tiny.json" --set "output.dir=\"$3\"" --set train.sample_tokens=0 \
    --set "train.steps=$STEPS" --set train.log_interval=1 --set train.global_batch_size=12 \
    --set "checkpoint.dir=\"$3/ck\"" --set checkpoint.interval=10 --set system.timeout_s=30
  A[$1]=$MC_PID
}
HOLD=()
# wait_held STEP: every rank of the job holds after STEP (the trainer's test hook; <= 90 s); release STEP.
wait_held() {
  for _ in $(seq 900); do [ "$(mc_count_files "$OUT/hold" "^held\.$1\.")" -ge 3 ] && return 0; sleep 0.1; done
  mc_fail "$SCENARIO: only $(mc_count_files "$OUT/hold" "^held\.$1\.") of 3 ranks held after step $1"
}
release() { touch "$OUT/hold/release.$1"; }
status_json() { mc_on "$DAEMON" "$RDZV" status --endpoint "127.0.0.1:$PORT" --json; }
wait_spares() {   # wait_spares N: until the daemon's status counts N spares (<= 10 s)
  for _ in $(seq 100); do [ "$(status_json | jq '.runs[0].spares')" = "$1" ] && return 0; sleep 0.1; done
  return 1
}
# check_shrunk ROUND NODE...: the NODEs restarted into ROUND as a world of 2 (no spare left) and finished.
check_shrunk() {
  local round=$1 i; shift
  for i in "$@"; do
    mc_wait_for "$W/node$i.log" "round $round: node" 60 > /dev/null || mc_fail "$SCENARIO: node$i did not restart into round $round"
    grep -q "round $round: node [01] of 2" "$W/node$i.log" || mc_fail "$SCENARIO: node$i's round $round is not 2 nodes"
  done
  for i in "$@"; do expect_exit "$i" 0; done
  [ -n "$(final_loss "$OUT")" ] || mc_fail "$SCENARIO: the job did not finish its $STEPS steps"
}
show_logs() { local f; for f in "$W"/node?.log "$W/daemon.log"; do echo "--- $(basename "$f")"; cat "$f"; done; }

# The reference: the same job on three nodes without a fault.
REF=$W/ref
run_reference "$REF"
[ -n "$REF_LOSS" ] || mc_fail "$SCENARIO: the reference run logged no loss for step $STEPS"

OUT=$W/job; mkdir -p "$OUT/hold"; RUN=job
# The job holds after step 12 (and 20: twofaults' second fault) while a fault is injected: never a race.
HOLD=(MESHRUN_TRAINER_HOLD_AFTER_STEP="$([ "$SCENARIO" = twofaults ] && echo 12,20 || echo 12):$OUT/hold")
for i in 0 1 2; do agent "$i" $RUN "$OUT"; done
wait_step "$OUT" 3
agent 3 $RUN "$OUT"   # joins a full round: the spare
mc_wait_for "$W/node3.log" "waiting" 20 > /dev/null || mc_fail "$SCENARIO: node3 did not wait as a spare"
wait_spares 1 || mc_fail "$SCENARIO: the daemon's status shows no spare"

# killed NODE RANK: the node's whole namespace is gone; the spare (node3) must take RANK.
check_spare_took() {
  mc_wait_for "$W/node3.log" "round 1: node $1 of 3" 60 > /dev/null ||
    mc_fail "$SCENARIO: the spare did not take node rank $1: $(grep 'round 1' "$W/node3.log")"
}
check_ledger() {   # check_ledger NODE...: each prints the restart's recovery, the daemon has it complete
  local i
  for i in "$@"; do
    mc_wait_for "$W/node$i.log" "recovery of round 1: " 60 > /dev/null || mc_fail "$SCENARIO: node$i printed no recovery ledger"
  done
  grep -h "recovery of round 1: " "$W/node$1.log" | sed "s/^/LEDGER $SCENARIO: /"
  status_json | jq -e '.runs[0].restarts[0].recovery | .complete and .first_step_s >= 0 and .stop_s >= 0' > /dev/null ||
    mc_fail "$SCENARIO: the daemon's status has no complete recovery ledger: $(status_json | jq -c '.runs[0].restarts')"
}

case $SCENARIO in
  spare | rank0)
    victim=1; [ "$SCENARIO" = rank0 ] && victim=0
    wait_held 12
    t0=$(mc_now); mc_kill_node $victim; echo "killed node$victim (node rank $victim) at step $(step "$OUT")"
    release 12
    check_spare_took $victim
    survivors=(); for i in 0 1 2; do [ "$i" != "$victim" ] && survivors+=("$i"); done
    check_ledger "${survivors[@]}" 3
    for i in "${survivors[@]}" 3; do expect_exit "$i" 0; done
    echo "RECOVERY $SCENARIO: job done $(mc_elapsed "$t0") s after the kill"
    # Every node that finished prints the run's goodput ledger: productive steps, and the one restart.
    for i in "${survivors[@]}" 3; do
      grep -q "meshrun: goodput [1-9][0-9.]* % of .*restarts [^,]* (1)" "$W/node$i.log" ||
        mc_fail "$SCENARIO: node$i printed no goodput ledger with one restart: $(grep 'goodput' "$W/node$i.log")"
    done
    grep -h "meshrun: goodput" "$W/node3.log" | sed "s/^/GOODPUT $SCENARIO: /"
    loss=$(final_loss "$OUT")
    [ "$loss" = "$REF_LOSS" ] || mc_fail "$SCENARIO: final loss $loss, without a fault $REF_LOSS"
    grep -q "round 1: node [0-9] of 3" "$W/node0.log" "$W/node2.log" "$W/node3.log" ||
      mc_fail "$SCENARIO: the job did not keep its size"
    ;;
  linkcut)
    wait_held 12
    mc_link_down 2
    release 12
    check_spare_took 2
    check_ledger 0 1 3
    mc_wait_for "$W/node2.log" "lost the rendezvous at node$DAEMON:$PORT" 60 > /dev/null ||
      mc_fail "$SCENARIO: the cut-off agent did not name the rendezvous it lost"
    expect_exit 2 1
    for i in 0 1 3; do expect_exit "$i" 0; done
    mc_link_up 2
    loss=$(final_loss "$OUT")
    [ "$loss" = "$REF_LOSS" ] || mc_fail "$SCENARIO: final loss $loss, without a fault $REF_LOSS"
    ;;
  twofaults)
    wait_held 12
    mc_kill_node 1
    release 12
    check_spare_took 1
    mc_wait_for "$W/node3.log" "recovery of round 1: " 60 > /dev/null || mc_fail "$SCENARIO: no recovery after the first fault"
    wait_held 20
    mc_kill_node 2
    release 20
    check_shrunk 2 0 3
    ;;
  sparedies)
    mc_kill_node 3
    wait_spares 0 || mc_fail "$SCENARIO: the dead spare is still listed"
    wait_held 12
    mc_kill_node 1
    release 12
    check_shrunk 1 0 2
    ;;
  *) echo "unknown scenario $SCENARIO"; exit 2 ;;
esac
mc_expect_gone "$MARKER" 20 && echo "$SCENARIO: no process of the job left on any node"
[ "$MC_FAILS" = 0 ] || show_logs
echo "$MC_FAILS failure(s)"
[ "$MC_FAILS" = 0 ]
