#!/bin/bash
# Elasticity and faults with real meshrun agents on 3 node namespaces (rendezvous hosted by node0's agent).
# One scenario per run; each measures and prints how long detection took (no timing is asserted: only
# behaviour, with generous deadlines as safety nets) and checks that no process of the job is left.
#   kill9       an agent is killed -9: the others restart without it (--nnodes 2:3), restart count 1
#   sigstop     an agent is stopped (SIGSTOP): the same; once resumed it re-joins and all three run round 2
#   linkdown    a node's link is cut: the others go on; the cut-off agent stops, naming the endpoint
#   partition   node0 and node2 cannot reach each other: the same as linkdown, through iptables
#   dropport    the rendezvous port is dropped on node0: nodes 1 and 2 stop naming the endpoint; node0 fails
#   hostdies    the rendezvous host's agent is killed -9: every other agent stops, naming the endpoint
#   latejoin    2 of --nnodes 2:3 start; a third node joins later and is admitted at the next round
#   belowmin    --nnodes 3 and a node dies: the others fail with a message naming the dead node
#   workerfail  a worker fails on node1: every node's workers restart together (--max-restarts 1), and every
#               agent names it as the root cause
#   workerfail0 the same with --max-restarts 0: every node stops
#   workerhang  a worker on node1 stops beating (beat_worker.py): its agent names it hung, every node
#               restarts (cause hung), and every agent names it as the root cause
# Usage: faults_test.sh SCENARIO MESHRUN   (root; exits 77 when namespaces cannot be made)
SCENARIO=$1 MESHRUN=$2
WORKER=$(cd "$(dirname "$0")" && pwd)/worker.sh
source "$(dirname "$0")/cluster.sh"
mc_init 3
W=$MC_DIR/work; mkdir -p "$W"; cd "$W" || exit 1
RUN=$SCENARIO; D=$W/$RUN; mkdir -p "$D"
PORT=29611
declare -a A   # agent pid per node

# agent I ARGS...: meshrun on node I for this scenario's run; log in $W/node<I>.log.
agent() {
  local i=$1; shift
  mc_spawn "$i" "$W/node$i.log" env MC_JOB=$RUN "$MESHRUN" --rdzv-backend c10d --rdzv-endpoint "node0:$PORT" \
    --rdzv-id "$RUN" --nproc-per-node 2 --shutdown-timeout 2 --log-level info "$@" --no-python "$WORKER" "$D"
  A[$i]=$MC_PID
}
# files N ATTEMPT: wait (<= 60 s) until N workers of ATTEMPT recorded their environment.
files() {
  for _ in $(seq 600); do [ "$(mc_count_files "$D" "^a$2\.r")" -ge "$1" ] && return 0; sleep 0.1; done
  mc_fail "$SCENARIO: only $(mc_count_files "$D" "^a$2\.r") of $1 workers of attempt $2 started"; return 1
}
# detect LABEL T0 NODE TEXT: wait (<= 30 s) for TEXT in NODE's log; prints the time since T0.
detect() {
  local t
  if mc_wait_for "$W/node$3.log" "$4" 30 > /dev/null; then
    t=$(mc_elapsed "$2"); echo "DETECTION $SCENARIO: $1 on node$3 after $t s"
  else
    mc_fail "$SCENARIO: node$3 did not report '$4' within 30 s"
  fi
}
expect_exit() {   # expect_exit NODE RC
  mc_wait_exit "${A[$1]}" 60
  [ "$MC_RC" = "$2" ] || mc_fail "$SCENARIO: node$1's meshrun exited $MC_RC, expected $2"
}
check_attempt() {   # check_attempt ATTEMPT NODES: every file of the attempt has the world of NODES nodes
  local f
  for f in "$D"/a$1.r*; do
    grep -qx "GROUP_WORLD_SIZE=$2" "$f" || mc_fail "$SCENARIO: $(basename "$f"): $(grep GROUP_WORLD_SIZE "$f"), expected $2"
    grep -qx "WORLD_SIZE=$(($2 * 2))" "$f" || mc_fail "$SCENARIO: $(basename "$f"): $(grep '^WORLD_SIZE' "$f")"
    grep -qx "TORCHELASTIC_RESTART_COUNT=$1" "$f" || mc_fail "$SCENARIO: $(basename "$f"): wrong restart count"
  done
}
show_logs() { local i; for i in 0 1 2; do [ -f "$W/node$i.log" ] && { echo "--- node$i"; cat "$W/node$i.log"; }; done; }
start3() { agent 0 "$@"; agent 1 "$@"; agent 2 "$@"; files 6 0 && check_attempt 0 3; }
ELASTIC=(--nnodes 2:3 --max-restarts 3 --rdzv-conf last_call_timeout=5)

case $SCENARIO in
  kill9 | sigstop)
    start3 "${ELASTIC[@]}"
    t0=$(mc_now)
    if [ "$SCENARIO" = kill9 ]; then mc_kill9 "${A[2]}"; else mc_stop "${A[2]}"; fi
    detect "node2's agent lost" "$t0" 0 "asks for a restart"
    detect "node2's agent lost" "$t0" 1 "asks for a restart"
    files 4 1 && check_attempt 1 2
    if [ "$SCENARIO" = sigstop ]; then
      # Resumed, node2's agent learns the others went on without it, stops its stale workers and joins
      # again as a newcomer: the others restart once more to admit it, and all three run round 2.
      t1=$(mc_now); mc_cont "${A[2]}"
      detect "node2 resumed and asked to restart" "$t1" 2 "asks for a restart"
      files 6 2 && check_attempt 2 3
      echo "DETECTION $SCENARIO: node2 back in the job (round 2, 3 nodes) $(mc_elapsed "$t1") s after SIGCONT"
    fi
    touch "$D/finish"
    expect_exit 0 0; expect_exit 1 0
    if [ "$SCENARIO" = sigstop ]; then expect_exit 2 0; fi
    # One survivor may already see the next event ("node1 joined round 1") as the reason; one names the dead node.
    cat "$W/node0.log" "$W/node1.log" | grep -q "node2 (pid ${A[2]}) is dead: no heartbeat" ||
      mc_fail "$SCENARIO: no survivor was told which node died"
    ;;
  linkdown | partition)
    start3 "${ELASTIC[@]}"
    t0=$(mc_now)
    if [ "$SCENARIO" = linkdown ]; then mc_link_down 2; else mc_partition 0 2; fi
    detect "node2 unreachable" "$t0" 0 "asks for a restart"
    detect "the rendezvous unreachable" "$t0" 2 "lost the rendezvous at node0:$PORT"
    expect_exit 2 1
    files 4 1 && check_attempt 1 2
    if [ "$SCENARIO" = linkdown ]; then mc_link_up 2; else mc_heal 0 2; fi
    touch "$D/finish"
    expect_exit 0 0; expect_exit 1 0
    ;;
  dropport)
    # NOTE: the daemon declares the first silent node dead and counts the other as a survivor that will
    # re-join; one that never does is declared lost only after keep-alive + 30 s (see docs/multi-node.md's
    # multi-node guide), so node0 ends by the join timeout, kept short here.
    start3 --nnodes 2:3 --max-restarts 3 --rdzv-conf last_call_timeout=5,join_timeout=8
    t0=$(mc_now)
    mc_drop_port 0 "$PORT"
    detect "rendezvous port dropped" "$t0" 1 "lost the rendezvous at node0:$PORT"
    detect "rendezvous port dropped" "$t0" 2 "lost the rendezvous at node0:$PORT"
    detect "another node silent" "$t0" 0 "asks for a restart"
    expect_exit 1 1; expect_exit 2 1; expect_exit 0 1
    mc_undrop_port 0 "$PORT"
    ;;
  hostdies)
    start3 --nnodes 3
    t0=$(mc_now)
    mc_kill9 "${A[0]}"
    detect "rendezvous host killed" "$t0" 1 "lost the rendezvous at node0:$PORT"
    detect "rendezvous host killed" "$t0" 2 "lost the rendezvous at node0:$PORT"
    expect_exit 1 1; expect_exit 2 1
    ;;
  latejoin)
    agent 0 --nnodes 2:3 --max-restarts 3 --rdzv-conf last_call_timeout=1
    agent 1 --nnodes 2:3 --max-restarts 3 --rdzv-conf last_call_timeout=1
    files 4 0 && check_attempt 0 2
    t0=$(mc_now)
    agent 2 --nnodes 2:3 --max-restarts 3 --rdzv-conf last_call_timeout=1
    # The late node's first attempt is its restart count 0 (counts are per agent, as in torchrun).
    for _ in $(seq 600); do [ "$(grep -lx "WORLD_SIZE=6" "$D"/a* 2> /dev/null | wc -l)" = 6 ] && break; sleep 0.1; done
    [ "$(grep -lx "GROUP_WORLD_SIZE=3" "$D"/a* 2> /dev/null | wc -l)" = 6 ] &&
      echo "DETECTION $SCENARIO: late node admitted, 6 workers running after $(mc_elapsed "$t0") s" ||
      mc_fail "$SCENARIO: the late node was not admitted: $(grep -l "GROUP_WORLD_SIZE=3" "$D"/a* 2> /dev/null)"
    touch "$D/finish"
    expect_exit 0 0; expect_exit 1 0; expect_exit 2 0
    ;;
  belowmin)
    start3 --nnodes 3 --max-restarts 3
    t0=$(mc_now)
    mc_kill9 "${A[2]}"
    detect "node2's agent lost, below minimum" "$t0" 0 "fewer than the minimum of 3"
    detect "node2's agent lost, below minimum" "$t0" 1 "fewer than the minimum of 3"
    expect_exit 0 1; expect_exit 1 1
    grep -q "node2 (pid ${A[2]}) is dead" "$W/node1.log" || mc_fail "$SCENARIO: node1's message does not name node2"
    ;;
  workerfail | workerfail0)
    restarts=1; [ "$SCENARIO" = workerfail0 ] && restarts=0
    start3 --nnodes 3 --max-restarts $restarts
    # Rank 3 lives on the node with group rank 1; find which host that is.
    t0=$(mc_now)
    touch "$D/fail.3.0"
    if [ $restarts = 1 ]; then
      files 6 1 && check_attempt 1 3 && echo "DETECTION $SCENARIO: all 6 workers restarted $(mc_elapsed "$t0") s after rank 3 failed"
      touch "$D/finish"
      expect_exit 0 0; expect_exit 1 0; expect_exit 2 0
    else
      for i in 0 1 2; do mc_wait_exit "${A[$i]}" 60; echo "node$i exited $MC_RC after $(mc_elapsed "$t0") s"; RC[$i]=$MC_RC; done
      for i in 0 1 2; do [ "${RC[$i]}" != 0 ] && [ "${RC[$i]}" != 124 ] || mc_fail "$SCENARIO: node$i exited ${RC[$i]}"; done
      echo "${RC[*]}" | grep -qw 3 || mc_fail "$SCENARIO: no node exited with the worker's code 3: ${RC[*]}"
    fi
    # Every agent names the job's first failure, the same one: rank 3 on the node of group rank 1.
    for i in 0 1 2; do
      grep -A1 "meshrun: root cause" "$W/node$i.log" | grep -q "^  rank 3 on node[0-2] (local rank 1): exit code 3" ||
        mc_fail "$SCENARIO: node$i did not name rank 3 as the root cause"
    done
    ;;
  workerhang)
    WORKER=$(dirname "$WORKER")/beat_worker.py
    start3 --nnodes 3 --max-restarts 1 --hang-timeout 2
    t0=$(mc_now)
    touch "$D/hang.3.0"
    files 6 1 && check_attempt 1 3 && echo "DETECTION $SCENARIO: all 6 workers restarted $(mc_elapsed "$t0") s after rank 3 stopped beating"
    touch "$D/finish"
    expect_exit 0 0; expect_exit 1 0; expect_exit 2 0
    cat "$W"/node?.log | grep -q "meshrun: suspected hang: rank 3: no progress beat for" ||
      mc_fail "$SCENARIO: no agent named rank 3 hung"
    for i in 0 1 2; do
      grep -A1 "meshrun: root cause" "$W/node$i.log" | grep -q "^  rank 3 on node[0-2] (local rank 1): hung: no progress beat" ||
        mc_fail "$SCENARIO: node$i did not name the hung rank 3 as the root cause"
    done
    ;;
  *) echo "unknown scenario $SCENARIO"; exit 2 ;;
esac
mc_expect_gone "MC_JOB=$RUN" 20 && echo "$SCENARIO: no process of the job left on any node"
[ "$MC_FAILS" = 0 ] || show_logs
echo "$MC_FAILS failure(s)"
[ "$MC_FAILS" = 0 ]
