#!/bin/bash
# Copies in memory (checkpoint.memory_interval; docs/checkpoints.md): meshrun-trainer (tiny config, one rank per
# node, a copy in memory every 5 steps, a storage checkpoint every 20) on 3 agent nodes, as many spares waiting
# as the scenario loses nodes (--nnodes 2:3), and meshrun-rendezvous on a sixth node. The fault comes after step 33, when memory holds a step
# newer than storage's 20. One scenario per run; only behaviour is asserted:
#   own       node1's worker is killed -9: every rank restores from its own agent, none from storage
#   buddy     node1 is killed whole: a spare takes node rank 1 and fetches rank 1's copy from node 2 (node 1's
#             buddy); the other ranks restore from their own agents
#   bothlost  node1 and node2 (its buddy) are killed together: rank 1's copy is nowhere, so every rank loads
#             the storage checkpoint of step 20 and says why
#   twofaults node1 is killed (as in buddy); rank 0's restored step goes to the spare, its new buddy, at once;
#             then, once the new ring has copies of later steps, node2: the second restore is from memory too,
#             rank 2's copy from node 0 (its buddy in either ring)
#   slowrep   as buddy, with every push to a buddy slowed 1.5 s (MESHRUN_FAULT_SLOW_REPLICATION), the job held
#             after step 32 (or 52, when no copy newer than storage's committed by 32: the pushes outran a slow
#             machine's steps) and node 1 killed once its push of the newest copy taken has landed (the hold keeps
#             the job from taking another; how many steps the lag spans depends on the machine): every push's
#             lag is reported ("... is on node N after X s", X >= 1.5), and rank 1 comes back from its buddy with
#             no more steps to do again than since that copy (the held step less the copy's)
#   hybrid    as buddy with two ranks per node and fsdp.strategy=HYBRID_SHARD (a shard group per node): the
#             spare fetches both of node 1's ranks from node 2
#   shrink    no spare: node2 is killed and the job goes on at 2 nodes; the 3-rank copies are resharded to 2
#             ranks (rank 2's copy fetched from node 0, its buddy), and the final loss equals a 2-node run that
#             loaded the same step from storage (the reference's checkpoint of that step)
# Each: the final loss equals a run without a fault, and no process of the job is left on any node. The job is
# held after step 33 (and 48) by the trainer's test hook (MESHRUN_TRAINER_HOLD_AFTER_STEP) while the fault is
# injected, then released: never a kill racing a running job.
# Usage: memory_test.sh SCENARIO MESHRUN RENDEZVOUS TRAINER CONFIG_DIR  (root; exits 77 without namespaces)
SCENARIO=$1 MESHRUN=$2 RDZV=$3 TRAINER=$4 CONFIGS=$5
source "$(dirname "$0")/cluster.sh"
source "$(dirname "$0")/trainer_steps.sh"
mc_init 6
W=$MC_DIR/work; mkdir -p "$W"; cd "$W" || exit 1
chmod 777 "$W"
PORT=29713 DAEMON=5 STEPS=60 NPROC=1 EXTRA=()
[ "$SCENARIO" = hybrid ] && NPROC=2 EXTRA=(--set fsdp.strategy=HYBRID_SHARD)
MARKER="MC_JOB=memory$$"
declare -a A   # agent pid per node (expect_exit reads it)

mc_spawn "$DAEMON" "$W/daemon.log" "$RDZV" --host 0.0.0.0 --port "$PORT"
for _ in $(seq 100); do grep -q "listening" "$W/daemon.log" && break; sleep 0.1; done

# agent I RUN OUT [--set K=V ...]: meshrun-trainer under meshrun on node I, in run RUN, writing to OUT; log in
# $W/RUN-node<I>.log. NNODES (2:3) and INTERVAL (20, storage) apply.
agent() {
  local node=$1 run=$2 out=$3; shift 3
  mc_spawn "$node" "$W/$run-node$node.log" env "$MARKER" OMP_NUM_THREADS=1 "${HOLD[@]}" "$MESHRUN" --rdzv-backend c10d \
    --rdzv-endpoint "node$DAEMON:$PORT" --rdzv-id "$run" --nnodes "${NNODES:-2:3}" --nproc-per-node "$NPROC" --max-restarts 3 \
    --log-level info --no-python "$TRAINER" \
    --config "$CONFIGS/tiny.json" --set "output.dir=\"$out\"" --set train.sample_tokens=0 \
    --set "train.steps=$STEPS" --set train.log_interval=1 --set train.global_batch_size=12 \
    --set "checkpoint.dir=\"$out/ck\"" --set "checkpoint.interval=${INTERVAL:-20}" --set checkpoint.memory_interval=5 \
    --set system.timeout_s=30 "${EXTRA[@]}" "$@"
  A[$node]=$MC_PID
}
HOLD=()
# wait_held STEP: until every rank of the job holds after STEP (<= 90 s); release STEP: let the job go on.
wait_held() {
  local ranks=$((3 * NPROC))
  for _ in $(seq 900); do [ "$(mc_count_files "$OUT/hold" "^held\.$1\.")" -ge "$ranks" ] && return 0; sleep 0.1; done
  mc_fail "$SCENARIO: only $(mc_count_files "$OUT/hold" "^held\.$1\.") of $ranks ranks held after step $1"
}
release() { touch "$OUT/hold/release.$1"; }
show_logs() { local f; for f in "$W"/job-node?.log "$W/daemon.log"; do echo "--- $(basename "$f")"; cat "$f"; done; }
restored_line() { grep -h "checkpoint: restored step\|nothing restored from memory" "$W"/job-node?.log | head -1; }

REF=$W/ref
# shrink compares with a run that loads the reference's storage checkpoint of the step memory restored.
INTERVAL=$([ "$SCENARIO" = shrink ] && echo 5 || echo 20) run_reference "$REF"
[ -n "$REF_LOSS" ] || mc_fail "$SCENARIO: the reference run logged no loss for step $STEPS"

OUT=$W/job; mkdir -p "$OUT/hold"; RUN=job
HELD_AT=33 HOLDS=33
[ "$SCENARIO" = twofaults ] && HOLDS=33,48
# slowrep: held after 32 (storage holds 20; copies of 25 and 30 may be newer) and, when the slowed pushes let no copy
# newer than storage's commit by then (a loaded machine steps slower than the pushes), after 52 (storage's 40).
[ "$SCENARIO" = slowrep ] && HELD_AT=32 HOLDS=32,52
HOLD=(MESHRUN_TRAINER_HOLD_AFTER_STEP="$HOLDS:$OUT/hold")
[ "$SCENARIO" = slowrep ] && HOLD+=(MESHRUN_FAULT_SLOW_REPLICATION=1.5)
for i in 0 1 2; do agent "$i" $RUN "$OUT"; done
wait_step "$OUT" 3
case $SCENARIO in own | shrink) spares=() ;; buddy | hybrid | slowrep) spares=(3) ;; *) spares=(3 4) ;; esac
for i in "${spares[@]}"; do
  agent "$i" $RUN "$OUT"
  mc_wait_for "$W/job-node$i.log" "waiting" 20 > /dev/null || mc_fail "$SCENARIO: node$i did not wait as a spare"
done
# The newest copy in memory every rank committed ('' before the first).
newest_committed() {
  grep '"event":"memory_copy"' "$OUT/metrics.jsonl" | grep '"committed":true' | grep -o '"step":[0-9]*' | cut -d: -f2 |
    sort -n | tail -1
}
wait_held $HELD_AT
if [ "$SCENARIO" = slowrep ] && [ "$(newest_committed)" -le 20 ] 2> /dev/null; then
  echo "slowrep: no copy newer than storage's step 20 committed by step 32 (newest: $(newest_committed)): held after 52"
  release 32
  HELD_AT=52
  wait_held $HELD_AT
  [ "$(newest_committed)" -gt 40 ] 2> /dev/null ||
    mc_fail "$SCENARIO: no copy newer than storage's step 40 committed by step 52 (newest: $(newest_committed))"
fi
case $SCENARIO in
  own)
    victim=$(ip netns pids "$(mc_ns 1)" | while read -r p; do
      [ "$(cat /proc/"$p"/comm 2> /dev/null)" = meshrun-trainer ] && echo "$p"; done | head -1)
    [ -n "$victim" ] || mc_fail "$SCENARIO: no worker found on node1"
    kill -9 "$victim"; echo "killed node1's worker at step $(step "$OUT")"
    release 33
    finishers=(0 1 2)
    ;;
  buddy | hybrid | slowrep)
    if [ "$SCENARIO" = slowrep ]; then  # the newest copy every rank committed, once rank 1's push of it landed
      newest=$(newest_committed)
      [ -n "$newest" ] || mc_fail "$SCENARIO: no copy in memory committed by step $HELD_AT"
      mc_wait_for "$W/job-node1.log" "rank 1's copy of step $newest is on node 2" 30 > /dev/null ||
        mc_fail "$SCENARIO: rank 1's copy of step $newest did not reach node 2 within 30 s"
    fi
    mc_kill_node 1; echo "killed node1 at step $(step "$OUT")"
    release $HELD_AT
    [ "$SCENARIO" = slowrep ] && release 52  # the restarted job passes the later hold unheld
    finishers=(0 2 3)
    ;;
  twofaults)
    mc_kill_node 1; echo "killed node1 at step $(step "$OUT")"
    release 33
    mc_wait_for "$W/job-node0.log" "recovery of round 1: " 60 > /dev/null || mc_fail "$SCENARIO: no recovery after the first fault"
    wait_held 48
    mc_kill_node 2; echo "killed node2 at step $(step "$OUT")"
    release 48
    finishers=(0 3 4)
    ;;
  shrink)
    mc_kill_node 2; echo "killed node2 at step $(step "$OUT")"
    release 33
    finishers=(0 1)
    ;;
  bothlost)
    mc_kill_node 1; mc_kill_node 2; echo "killed node1 and node2 at step $(step "$OUT")"
    release 33
    finishers=(0 3 4)
    ;;
  *) echo "unknown scenario $SCENARIO"; exit 2 ;;
esac
for i in "${finishers[@]}"; do expect_exit "$i" 0; done
line=$(restored_line); echo "RESTORE $SCENARIO: $line"
case $SCENARIO in
  own)
    echo "$line" | grep -q "from memory (every rank from its own agent)" ||
      mc_fail "$SCENARIO: not restored from the own agents: $line"
    ;;
  buddy | twofaults)
    echo "$line" | grep -q "from memory (2 rank(s) from their own agents, 1 from another node's" ||
      mc_fail "$SCENARIO: rank 1 was not restored from its buddy: $line"
    grep -q "memory: fetched rank 1's copy of step [0-9]* from node 2" "$W"/job-node3.log "$W"/job-node4.log ||
      mc_fail "$SCENARIO: no spare says it fetched rank 1's copy from node 2"
    ;;
  hybrid)
    echo "$line" | grep -q "from memory (4 rank(s) from their own agents, 2 from another node's" ||
      mc_fail "$SCENARIO: ranks 2-3 were not restored from their buddy: $line"
    grep -q "memory: fetched rank 3's copy of step [0-9]* from node 2" "$W"/job-node3.log ||
      mc_fail "$SCENARIO: the spare does not say it fetched rank 3's copy from node 2"
    ;;
  slowrep)
    echo "$line" | grep -q "from memory (2 rank(s) from their own agents, 1 from another node's" ||
      mc_fail "$SCENARIO: rank 1 was not restored from its buddy: $line"
    # The lag each push took, as the agents report it, and in steps at the job's fastest step time.
    lag_s=$(grep -ho "memory: rank [0-9]*'s copy of step [0-9]* is on node [0-9]* ([a-z0-9]*) after [0-9.]* s" "$W"/job-node?.log |
      awk '{ print $(NF - 1) }' | sort -g | tail -1)
    [ -n "$lag_s" ] || mc_fail "$SCENARIO: no push reported its lag"
    awk -v l="${lag_s:-0}" 'BEGIN { exit !(l >= 1.5) }' || mc_fail "$SCENARIO: the largest lag reported, ${lag_s} s, is under the 1.5 s injected"
    fastest=$(grep -o '"step_time_s":[0-9.e-]*' "$OUT/metrics.jsonl" | cut -d: -f2 | sort -g | head -1)
    lag_steps=$(awk -v l="${lag_s:-0}" -v f="${fastest:-1}" 'BEGIN { n = l / f; print (n == int(n)) ? n : int(n) + 1 }')
    again=$(echo "$line" | grep -o "[0-9]* step(s) to do again" | grep -o "^[0-9]*")
    echo "SLOWREP: ${again:-0} steps to do again; K 5, the lag ${lag_s} s = ${lag_steps} steps at ${fastest} s a step"
    # Node 1 was killed once rank 1's copy of the newest step every rank had committed ($newest) was on its
    # buddy: the restore is from that step or a newer one, never an older, whatever the lag.
    [ -n "${again}" ] && [ "${again}" -le $((HELD_AT - newest)) ] ||
      mc_fail "$SCENARIO: '${again}' steps to do again, more than the ${HELD_AT} - ${newest} since the newest copy on its buddy"
    ;;
  shrink)
    echo "$line" | grep -q "from memory (resharded from 3 ranks to 2; 2 rank(s) fetched copies from other nodes)" ||
      mc_fail "$SCENARIO: the 3-rank copies were not resharded to 2 ranks: $line"
    ;;
  bothlost)
    echo "$line" | grep -q "nothing restored from memory: step [0-9]* lacks the copies of rank(s) 1 .*loading .*step_00000020" ||
      mc_fail "$SCENARIO: the fallback to storage does not say why: $line"
    ;;
esac
if [ "$SCENARIO" = twofaults ]; then   # the second restore: from the ring the spare joined
  # The new ring: the step rank 0 resumed from goes to its new buddy (the spare, node3) at once; nothing else
  # would send it, since the run never makes that step again.
  first=$(echo "$line" | grep -o "restored step [0-9]*" | grep -o "[0-9]*$")
  grep -q "memory: rank 0's copy of step $first is on node 1 (node3)" "$W/job-node0.log" ||
    mc_fail "$SCENARIO: rank 0's restored step $first was not pushed to the spare that joined the ring"
  second=$(grep -h "checkpoint: restored step\|nothing restored from memory" "$W"/job-node0.log | sed -n 2p)
  echo "RESTORE $SCENARIO (second): $second"
  echo "$second" | grep -q "from memory (2 rank(s) from their own agents, 1 from another node's" ||
    mc_fail "$SCENARIO: the second fault was not restored from memory: $second"
  step2=$(echo "$second" | grep -o "restored step [0-9]*" | grep -o "[0-9]*$")
  [ -n "$step2" ] && [ "$step2" -ge 40 ] || mc_fail "$SCENARIO: the second restore is of step '$step2', not one the new ring copied"
fi
# The steps done again: at most the interval (5) from the own agent, plus the replication lag from a buddy.
again=$(echo "$line" | grep -o "[0-9]* step(s) to do again" | grep -o "^[0-9]*")
if [ "$SCENARIO" = own ] && [ "${again:-0}" -gt 5 ]; then   # none printed: nothing to do again
  mc_fail "$SCENARIO: '$again' steps to do again from the own agents, more than the interval 5"
fi
if [ "$SCENARIO" != bothlost ]; then
  step_restored=$(echo "$line" | grep -o "restored step [0-9]*" | grep -o "[0-9]*$")
  storage=$((HELD_AT / 20 * 20))  # the storage checkpoint the fault found: 20, or 40 for slowrep held after 52
  [ -n "$step_restored" ] && [ "$step_restored" -gt $storage ] ||
    mc_fail "$SCENARIO: restored step '$step_restored' is not newer than storage's $storage"
fi
# The recovery ledger names the source of its load phase.
case $SCENARIO in own) from="memory" ;; bothlost) from="storage" ;; *) from="memory (buddy)" ;; esac
grep -q "recovery of round 1: .* load [0-9.]* s from $from, " "$W/job-node0.log" ||
  mc_fail "$SCENARIO: the recovery ledger does not say the load came from $from: $(grep -h 'recovery of round 1' "$W/job-node0.log")"
if [ "$SCENARIO" = shrink ]; then   # the reference: 2 nodes from the reference's storage checkpoint of that step
  REF2=$W/ref2; mkdir -p "$REF2"
  ck=$(printf '%s/ck/step_%08d' "$REF" "$step_restored")
  [ -f "$ck/metadata.json" ] || mc_fail "$SCENARIO: the reference has no checkpoint of step $step_restored"
  for i in 0 1; do NNODES=2 agent "$i" ref2 "$REF2" --set "checkpoint.resume=\"$ck\""; done
  for i in 0 1; do expect_exit "$i" 0; done
  REF_LOSS=$(final_loss "$REF2")
fi
loss=$(final_loss "$OUT")
[ "$loss" = "$REF_LOSS" ] || mc_fail "$SCENARIO: final loss $loss, without a fault $REF_LOSS"
mc_expect_gone "$MARKER" 20 && echo "$SCENARIO: no process of the job left on any node"
[ "$MC_FAILS" = 0 ] || show_logs
echo "$MC_FAILS failure(s)"
[ "$MC_FAILS" = 0 ]
