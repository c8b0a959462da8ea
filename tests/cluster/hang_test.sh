#!/bin/bash
# Hangs named with no code in the script: two nodes (network namespaces), two PyTorch Gloo ranks each,
# running tests/cluster/hang_job.py (no beats, no decorator). One scenario per run:
#   skip      rank 3 (node1) never enters an all_reduce (it waits on an event nothing sets): every node names it, the
#             collective and the group
#   stop      rank 0 stops itself (SIGSTOP) between collectives: rank 0 is named stopped, not a waiting rank
#   stopremote rank 2 (node1) stops itself 3 s after node0's ranks began waiting for it, so node0 suspects
#             first: every node names rank 2 stopped, with the collective and its sequence number
#   spin      rank 2 spins in Python before an all_reduce: busy, so every node names it late, not hung; with
#             --hang-busy-timeout 12 it is then named hung, past that timeout
#   mismatch  rank 1 calls broadcast where ranks 0,2,3 all_reduce: the mismatch is named
#   subgroup  rank 3 never enters an all_reduce of its pair group (new_group) while the default group is
#             idle: the verdict names group 2 (ranks 2,3)
#   usersite  the user's own sitecustomize (on PYTHONPATH) still runs in every worker; rank 1 skips: named
#   pause     every rank pauses 12 s without collectives (a checkpoint): no hang, the job ends 0
#   nocoll    a script with no collectives at all: no hang, the job ends 0
#   slowfirst rank 1's first step computes for 10 s while the others wait in the first all_reduce: from the
#             first collective on a wait is judged, and a busy rank is late, not hung: a late line, the job ends 0
#   defaults  the default hang budget (auto, floor 60 s): a 12 s pause passes, then rank 0 skips: named
#   etcd      the skip fault with the etcd-v3 backend (one real etcd member on node0, no meshrun daemon): the
#             agents exchange their records through node rank 0's workers' store; both name rank 3
#   native    a non-Python worker that ignores SIGTERM is stopped (SIGSTOP): with --fault-stop-timeout 30
#             stopping it takes 30 s (the others noted the SIGTERM they ignored, and attempt 1 began 30 s or
#             more after the stop), and the node keeps heartbeating meanwhile: the job restarts (--nnodes 2
#             fixed) instead of failing for a lost node
#   trainerstop meshrun-trainer (beats, its own collective ledger) on the two nodes, one rank each: rank 1
#             (node1) stops itself 3 s after its step 30, so node0 suspects first: every node names rank 1
#             stopped, and rank 0 waiting in step 31's all_gather (a sequence number past step 30's)
# Every scenario but pause/nocoll/slowfirst/native runs with --max-restarts 0 and checks: the verdict line on
# both nodes, the root cause on both naming the culprit, hang.json in the log folder, both agents exit 1, and
# that no process of the job is left. Scenarios other than defaults use --hang-floor 3 (stopremote and
# trainerstop 6: the 3 s before the stop stay under it).
# Usage: hang_test.sh SCENARIO MESHRUN VENV_BIN [TRAINER CONFIG_DIR]  (root; exits 77 when namespaces cannot be made)
SCENARIO=$1 MESHRUN=$2 VENV_BIN=$3 TRAINER=${4:-} CONFIGS=${5:-}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/cluster.sh"
mc_init 2
W=$MC_DIR/work; mkdir -p "$W"; cd "$W" || exit 1
RUN=$SCENARIO; D=$W/out; L=$W/logs; mkdir -p "$D" "$L"
PORT=29631
STEP=20
declare -a A
FLOOR=(--hang-floor 3)
[ "$SCENARIO" = defaults ] && FLOOR=()
[ "$SCENARIO" = stopremote ] || [ "$SCENARIO" = trainerstop ] && FLOOR=(--hang-floor 6)
EXTRA_ENV=()
EXTRA_FLAGS=()
NPROC=2

RDZV=(--rdzv-backend c10d --rdzv-endpoint "node0:$PORT")
if [ "$SCENARIO" = etcd ]; then
  [ -x /usr/bin/etcd ] || { echo "FAILED: /usr/bin/etcd is missing: install etcd-server (scripts/setup.sh does)"; exit 1; }
  mc_spawn 0 "$W/etcd.log" etcd --name e0 --data-dir "$W/etcd" \
    --listen-client-urls "http://$(mc_ip 0):2379" --advertise-client-urls "http://$(mc_ip 0):2379" \
    --listen-peer-urls "http://$(mc_ip 0):2380" --initial-advertise-peer-urls "http://$(mc_ip 0):2380" \
    --initial-cluster "e0=http://$(mc_ip 0):2380"
  for _ in $(seq 150); do mc_on 0 curl -sf --max-time 1 "http://$(mc_ip 0):2379/health" > /dev/null && break; sleep 0.2; done
  RDZV=(--rdzv-backend etcd-v3 --rdzv-endpoint "$(mc_ip 0):2379")
fi

# agent I ARGS... -- WORKER ARGS: meshrun on node I; log in $W/node<I>.log.
agent() {
  local i=$1; shift
  mc_spawn "$i" "$W/node$i.log" env MC_JOB=$RUN PATH="$VENV_BIN:$PATH" "${EXTRA_ENV[@]}" "$MESHRUN" \
    "${RDZV[@]}" --rdzv-id "$RUN" --nnodes 2 --nproc-per-node "$NPROC" --log-dir "$L" "$@"
  A[$i]=$MC_PID
}
both() { agent 0 "$@"; agent 1 "$@"; }
job() { both --max-restarts 0 "${FLOOR[@]}" "${EXTRA_FLAGS[@]}" "$HERE/hang_job.py" "$D" "$@"; }
expect_exit() {   # expect_exit NODE RC SECS
  mc_wait_exit "${A[$1]}" "$3"
  [ "$MC_RC" = "$2" ] || mc_fail "$SCENARIO: node$1's meshrun exited $MC_RC, expected $2"
}
show_logs() { local i; for i in 0 1; do [ -f "$W/node$i.log" ] && { echo "--- node$i"; cat "$W/node$i.log"; }; done; }
started() {   # started N: wait (<= 90 s) until N ranks built their process group
  for _ in $(seq 900); do [ "$(mc_count_files "$D" '^started\.')" -ge "$1" ] && return 0; sleep 0.1; done
  mc_fail "$SCENARIO: only $(mc_count_files "$D" '^started\.') of $1 ranks started"
}
# verdict TEXT SECS: both agents exit 1 within SECS, both print TEXT (a regex) as the verdict and name the
# culprit rank as the root cause; hang.json is in the log folder.
verdict() {
  local text=$1 secs=$2 culprit=$3 i
  expect_exit 0 1 "$secs"; expect_exit 1 1 30
  for i in 0 1; do
    grep -Eq "^meshrun: $text" "$W/node$i.log" || mc_fail "$SCENARIO: node$i's verdict is not '$text'"
    grep -A1 "meshrun: root cause" "$W/node$i.log" | grep -q "^  rank $culprit on node" ||
      mc_fail "$SCENARIO: node$i's root cause does not name rank $culprit"
  done
  ls "$L"/*/attempt_0/hang.json > /dev/null 2>&1 || mc_fail "$SCENARIO: no hang.json in $L/<run>/attempt_0"
  grep -h "^meshrun: hang: " "$W"/node?.log | sort -u | sed "s/^/VERDICT $SCENARIO: /"
}
no_hang() {
  expect_exit 0 0 "$1"; expect_exit 1 0 30
  grep -Eq "hang:|worker hung|suspected a hang" "$W"/node?.log &&
    mc_fail "$SCENARIO: a hang was reported: $(grep -Eh 'hang:|worker hung|suspected a hang' "$W"/node?.log | head -3)"
  [ "$(mc_count_files "$D" '^done\.')" = 4 ] || mc_fail "$SCENARIO: $(mc_count_files "$D" '^done\.') of 4 ranks ended cleanly"
}
late_on_both() {  # late_on_both TEXT: every node printed TEXT (a regex) as a late line
  local i
  for i in 0 1; do
    grep -Eq "^meshrun: $1" "$W/node$i.log" || mc_fail "$SCENARIO: node$i did not print the late line '$1'"
  done
  grep -h " is late: " "$W"/node?.log | sort -u | sed "s/^/LATE $SCENARIO: /"
}
suspected_first_on() {  # suspected_first_on NODE: that node raised the suspicion the other node judged
  local other=$((1 - $1))
  grep -q "^meshrun: suspected hang: rank " "$W/node$1.log" || mc_fail "$SCENARIO: node$1 did not suspect first"
  grep -q "^meshrun: another node suspected a hang" "$W/node$other.log" ||
    mc_fail "$SCENARIO: node$other did not judge node$1's suspicion"
}
PID='pid [0-9]+'
ALL='group 0 \(ranks 0-3\)'
SEQ=$((STEP + 1))   # collective sequence numbers start at 1: the all_reduce of step 20 is #21

case $SCENARIO in
  skip | etcd) job skip 3 $STEP; verdict "hang: rank 3 \(node1, local rank 1, $PID\) never entered all_reduce #$SEQ of $ALL; ranks 0-2 wait in it since [0-9:]+, called at .*hang_job.py:[0-9]+ in train_step" 90 3 ;;
  stop) job stop 0 $STEP; verdict "hang: rank 0 \(node0, local rank 0, $PID\) is stopped by a signal \(state T\); ranks 1-3 wait in all_reduce #$SEQ of $ALL" 90 0 ;;
  stopremote)
    job stoplate 2 $STEP
    verdict "hang: rank 2 \(node1, local rank 0, $PID\) is stopped by a signal \(state T\); ranks 0,1,3 wait in all_reduce #$SEQ of $ALL" 90 2
    suspected_first_on 0 ;;
  spin)
    EXTRA_FLAGS=(--hang-busy-timeout 12)
    job spin 2 $STEP
    verdict "hang: rank 2 \(node1, local rank 0, $PID\) has kept ranks 0,1,3 waiting in all_reduce #$SEQ of $ALL for [0-9]+ s, past --hang-busy-timeout \(12 s\); it is busy" 90 2
    late_on_both "rank 2 \(node1\) is late: it has not entered all_reduce #$SEQ of $ALL for [0-9]+ s while ranks 0,1,3 wait; it is busy \([0-9.]+ CPU[^)]*\) in train_step at hang_job.py:[0-9]+" ;;
  mismatch) job mismatch 1 $STEP; verdict "hang: ranks disagree at #$SEQ of $ALL: rank 1 called broadcast, ranks 0,2,3 all_reduce" 90 1 ;;
  subgroup) job subgroup 3 $STEP; verdict "hang: rank 3 \(node1, local rank 1, $PID\) never entered all_reduce #$SEQ of group 2 \(ranks 2,3\); rank 2 waits in it" 90 3 ;;
  usersite)
    mkdir -p "$W/usersite"
    printf 'import os\nopen(os.path.join("%s", "usersite.%%d" %% os.getpid()), "w").close()\n' "$D" > "$W/usersite/sitecustomize.py"
    EXTRA_ENV=(PYTHONPATH="$W/usersite")
    job skip 1 $STEP
    verdict "hang: rank 1 \(node0, local rank 1, $PID\) never entered all_reduce #$SEQ of $ALL" 90 1
    [ "$(mc_count_files "$D" '^usersite\.')" -ge 4 ] || mc_fail "$SCENARIO: the user's sitecustomize ran in $(mc_count_files "$D" '^usersite\.') of 4 workers" ;;
  pause) job pause 0 $STEP 60; no_hang 120 ;;
  nocoll) job nocoll 0 0; no_hang 90 ;;
  slowfirst)
    job slowfirst 1 0 60; no_hang 120
    late_on_both "rank 1 \(node0\) is late: it has not entered all_reduce #1 of $ALL for [0-9]+ s while ranks 0,2,3 wait; it is busy" ;;
  defaults)
    job pause_skip 0 $STEP
    verdict "hang: rank 0 \(node0, local rank 0, $PID\) never entered all_reduce #$((STEP + 41)) of $ALL" 200 0 ;;
  native)
    both --max-restarts 1 --fault-stop-timeout 30 "${FLOOR[@]}" --no-python "$HERE/term_ignoring_worker.sh" "$D"
    for _ in $(seq 300); do [ "$(mc_count_files "$D" '^a0\.')" -ge 4 ] && break; sleep 0.1; done
    t0=$(mc_now); kill -STOP "$(cat "$D/a0.3")"
    for _ in $(seq 1200); do [ "$(mc_count_files "$D" '^a1\.')" -ge 1 ] && break; sleep 0.1; done
    restarted_after=$(mc_elapsed "$t0")
    expect_exit 0 0 120; expect_exit 1 0 30
    echo "NATIVE: attempt 1 began $restarted_after s after rank 3 was stopped"
    [ "$(mc_count_files "$D" '^a1\.')" = 4 ] || mc_fail "$SCENARIO: $(mc_count_files "$D" '^a1\.') of 4 workers ran attempt 1"
    # The stop took the whole --fault-stop-timeout: the running ranks got SIGTERM, ignored it, and attempt 1
    # could only begin once SIGKILL ended them, 30 s later.
    [ "$(mc_count_files "$D" '^term\.')" -ge 3 ] || mc_fail "$SCENARIO: only $(mc_count_files "$D" '^term\.') workers noted a SIGTERM"
    [ "$(awk -v e="$restarted_after" 'BEGIN { print (e >= 30) }')" = 1 ] ||
      mc_fail "$SCENARIO: attempt 1 began $restarted_after s after the stop: the 30 s stop did not happen"
    grep -Eq "^meshrun: hang: rank 3 \(node1, local rank 1, $PID\) is stopped by a signal" "$W/node1.log" ||
      mc_fail "$SCENARIO: node1 did not name the stopped rank 3"
    grep -q "lost\|dead" "$W"/node?.log && mc_fail "$SCENARIO: a node was declared lost: $(grep -h 'lost\|dead' "$W"/node?.log | head -2)" ;;
  trainerstop)
    [ -x "$TRAINER" ] || { echo "FAILED: trainerstop needs meshrun-trainer (argument 4)"; exit 1; }
    EXTRA_ENV=(MESHRUN_TRAINER_FAULT_STOP_AFTER_STEP=30:1:3 OMP_NUM_THREADS=1)
    NPROC=1
    agent 0 --max-restarts 0 "${FLOOR[@]}" --no-python "$TRAINER" --config "$CONFIGS/tiny.json" \
      --set "output.dir=\"$D/trainer\"" --set train.steps=100000 --set train.sample_tokens=0
    agent 1 --max-restarts 0 "${FLOOR[@]}" --no-python "$TRAINER" --config "$CONFIGS/tiny.json" \
      --set "output.dir=\"$D/trainer\"" --set train.steps=100000 --set train.sample_tokens=0
    verdict "hang: rank 1 \(node1, local rank 0, $PID\) is stopped by a signal \(state T\); rank 0 waits in all_gather #[0-9]+ of group 0 \(ranks 0,1\)" 120 1
    # Rank 1 stopped after step 30: rank 0 waits in step 31's first collective (FULL_SHARD's all_gather of the first
    # unit), so the collective is past every one of the first 30 steps' (at least one per step).
    seq=$(grep -hoE "rank 0 waits in all_gather #[0-9]+" "$W/node0.log" | head -1 | grep -oE "[0-9]+$")
    [ "${seq:-0}" -gt 30 ] || mc_fail "$SCENARIO: rank 0 waits in collective #${seq:-?}, not one after step 30's"
    suspected_first_on 0 ;;
  *) echo "unknown scenario $SCENARIO"; exit 2 ;;
esac
mc_expect_gone "MC_JOB=$RUN" 20 && echo "$SCENARIO: no process of the job left on any node"
[ "$MC_FAILS" = 0 ] || show_logs
echo "$MC_FAILS failure(s)"
[ "$MC_FAILS" = 0 ]
