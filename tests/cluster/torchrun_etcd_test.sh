#!/bin/bash
# Stock torchrun (.venv's PyTorch) with --rdzv-backend etcd-v3: the handler meshrun's wheel ships
# (launcher/torchrun/), found through the torchrun.handlers entry point of a dist-info written from
# pyproject.toml (tests/launcher/torchrun/make_site.py), as an installed wheel is found. 3 node namespaces,
# each running a member of a real 3-member etcd cluster (Debian's etcd-server); torchrun agents with one Gloo
# worker each (torchrun_etcd_job.py). Only behaviour is asserted, no timing; faults are injected while the job
# holds at a known step.
#   run        2 agents: the job runs and both agents exit 0
#   latejoin   --nnodes 2:3 --max-restarts 0: 2 agents run the job (held in a world of 2); a third agent
#              joins, the job restarts in a world of 3 (a scale-up, not a restart) and ends 0 everywhere
#   workerfail --max-restarts 1, rank 1 fails once: both agents restart the job (attempt 1) and exit 0. The
#              same job then runs under torchrun's own c10d backend; its outcome is printed beside ours
#              (torch 2.15's handler reuses attempt 0's workers' store there), and ours must be no worse
#   member     the etcd leader, which is also the member every agent tries first, is killed -9 while the job
#              holds; once every agent has heartbeaten through the other members the job is released: it
#              ends 0 without a restart
#   nodelost   3 agents, --nnodes 2:3 --max-restarts 1: every process of node0 is killed -9 while the job
#              holds (node rank 0, whose agent serves the workers' store; its etcd member too); the two
#              survivors form a new round with a new store and the job ends 0 in a world of 2
# Each scenario ends with no key of the run left in etcd (at once when every agent ended; nodelost: once the
# dead agent's lease expired) and no process of the job left on any node.
# Usage: torchrun_etcd_test.sh SCENARIO VENV_BIN   (root; exits 77 when namespaces cannot be made)
SCENARIO=$1 VENV_BIN=$(cd "$2" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
source "$HERE/cluster.sh"
[ -x /usr/bin/etcd ] || { echo "FAILED: /usr/bin/etcd is missing: install etcd-server (scripts/setup.sh does)"; exit 1; }
[ -x "$VENV_BIN/torchrun" ] || { echo "FAILED: $VENV_BIN/torchrun is missing (scripts/setup.sh makes .venv)"; exit 1; }
mc_init 3
W=$MC_DIR/work; mkdir -p "$W"; cd "$W" || exit 1
D=$W/job; mkdir -p "$D"; chmod 777 "$D"
SITE=$("$VENV_BIN/python" "$ROOT/tests/launcher/torchrun/make_site.py" "$W/site") || exit 1
MARKER="MC_JOB=torchrun$$"
RUN=job$$
ENDPOINTS="$(mc_ip 0):2379,$(mc_ip 1):2379,$(mc_ip 2):2379"
# Heartbeats every second, a node dead after 5 missed; 2 s of last call at MIN:MAX; the run's leases 10 s. (With 3
# missed and 5 s leases, an agent starved of CPU for 3 s on a loaded machine (the suite runs its tests side by side)
# was taken for dead, and the job outwaited the test.)
CONF=keep_alive_interval=1,keep_alive_max_attempt=5,last_call_timeout=2,lease_ttl=10,read_timeout=10
declare -a A E   # torchrun agent and etcd member pid per node

etcd_up() { mc_etcd_up "$W"; }

probe() { mc_on 1 env PYTHONPATH="$SITE" "$VENV_BIN/python" "$HERE/torchrun_etcd_probe.py" "$@"; }

# agent I ARGS...: torchrun on node I (1 worker) with the etcd-v3 backend; log in $W/node<I>.log.
# BACKEND, RDZV_ENDPOINT, RDZV_ID, OUT and JOB_MARKER override the backend, endpoint, run id, job directory
# and the marker in the environment of the job's processes.
agent() {
  local i=$1; shift
  mc_spawn "$i" "$W/node$i.log" env "${JOB_MARKER:-$MARKER}" PYTHONPATH="$SITE" JOB_HOLD_AT="${HOLD_AT:--1}" \
    ${HOLD_WORLD:+JOB_HOLD_WORLD=$HOLD_WORLD} ${FAIL:+JOB_FAIL=$FAIL} \
    "$VENV_BIN/torchrun" --nproc-per-node 1 --rdzv-backend "${BACKEND:-etcd-v3}" \
    --rdzv-endpoint "${RDZV_ENDPOINT:-$ENDPOINTS}" --rdzv-id "${RDZV_ID:-$RUN}" --monitor-interval 0.5 \
    --rdzv-conf "$CONF" "$@" "$HERE/torchrun_etcd_job.py" "${OUT:-$D}" "$STEPS"
  A[$i]=$MC_PID
}
expect_exit() {   # expect_exit NODE RC
  mc_wait_exit "${A[$1]}" 120
  [ "$MC_RC" = "$2" ] || mc_fail "$SCENARIO: node$1's torchrun exited $MC_RC, expected $2"
}
wait_held() {   # wait_held RANKS: until that many ranks hold at HOLD_AT (<= 90 s); the fault is injected then
  for _ in $(seq 900); do [ "$(mc_count_files "$D" '^held\.')" -ge "$1" ] && return 0; sleep 0.1; done
  mc_fail "$SCENARIO: only $(mc_count_files "$D" '^held\.') of $1 ranks held at step $HOLD_AT"; show_logs; exit 1
}
release() { touch "$D/release"; }
expect_done() {   # expect_done RANK "WORLD ATTEMPT [HOST]" (a glob): what rank RANK wrote when it finished
  local seen; seen=$(cat "$D/done.$1" 2> /dev/null)
  # shellcheck disable=SC2053  # $2 is a pattern
  [[ "$seen" == $2* ]] || mc_fail "$SCENARIO: rank $1 finished with '$seen', expected '$2'"
}
no_keys_left() {   # no_keys_left SECS: no key of the run in etcd, at once (0) or within SECS
  local left
  for _ in $(seq $((${1} * 5 + 1))); do
    left=$(probe keys "$ENDPOINTS" "/meshrun/torchrun/$RUN/")
    [ "$left" = 0 ] && { echo "etcd: no key of run $RUN left"; return 0; }
    sleep 0.2
  done
  mc_fail "$SCENARIO: $left keys of run $RUN left in etcd (/meshrun/torchrun/$RUN/)"
}
show_logs() { local f; for f in "$W"/node*.log; do [ -f "$f" ] && { echo "--- $(basename "$f")"; tail -40 "$f"; }; done; }

etcd_up
case $SCENARIO in
  run)
    STEPS=3
    agent 0 --nnodes 2; agent 1 --nnodes 2
    for i in 0 1; do expect_exit "$i" 0; done
    expect_done 0 "2 0 node"; expect_done 1 "2 0 node"
    no_keys_left 0
    ;;
  latejoin)
    STEPS=4 HOLD_AT=2 HOLD_WORLD=2
    agent 0 --nnodes 2:3 --max-restarts 0; agent 1 --nnodes 2:3 --max-restarts 0
    wait_held 2
    echo "the job holds at step 2 in a world of 2; a third node joins"
    agent 2 --nnodes 2:3 --max-restarts 0
    for i in 0 1 2; do expect_exit "$i" 0; done
    for r in 0 1 2; do expect_done "$r" "3 0 node"; done
    no_keys_left 0
    ;;
  workerfail)
    STEPS=4 FAIL=1:2
    agent 0 --nnodes 2 --max-restarts 1; agent 1 --nnodes 2 --max-restarts 1
    for i in 0 1; do expect_exit "$i" 0; done
    grep -q "failing on purpose" "$W"/node*.log || mc_fail "workerfail: no rank failed in attempt 0"
    # The failed worker's agent restarts its workers with TORCHELASTIC_RESTART_COUNT=1. The other agent may
    # see that node waiting before it sees its own worker fail, and restart through torchrun's membership
    # path, where the count stays 0 (seen once in CI). Either way every rank finishes in a world of 2, in the
    # second attempt (the first one's ranks could not: one of them exited), and a restart was counted.
    for r in 0 1; do
      [[ "$(cat "$D/done.$r" 2> /dev/null)" =~ ^2\ [01]\ node ]] ||
        mc_fail "workerfail: rank $r finished with '$(cat "$D/done.$r" 2> /dev/null)', expected '2 0|1 node'"
    done
    cat "$D"/done.* 2> /dev/null | grep -q "^2 1 node" || mc_fail "workerfail: no rank finished counting the restart"
    no_keys_left 0
    ours="exit 0 0"
    # The same job under torchrun's own c10d backend (its store on node0's agent), for comparison. Its
    # agents may hang (torch 2.15's luck, docs/daemon.md): once one has failed the other gets 15 s more (90 s
    # in all), then whatever is left of that job (its own marker) is killed.
    mkdir -p "$W/c10d"; chmod 777 "$W/c10d"
    for i in 0 1; do mv "$W/node$i.log" "$W/node$i.etcd-v3.log"; done
    for i in 0 1; do
      JOB_MARKER="MC_JOB=c10d$$" BACKEND=c10d RDZV_ENDPOINT=node0:29400 RDZV_ID=c10d$$ OUT=$W/c10d \
        agent "$i" --nnodes 2 --max-restarts 1
    done
    rc=("" "") failed_at=""
    for _ in $(seq 900); do
      for i in 0 1; do
        if [ -z "${rc[$i]}" ] && ! kill -0 "${A[$i]}" 2> /dev/null; then wait "${A[$i]}"; rc[$i]=$?; fi
      done
      [ -n "${rc[0]}" ] && [ -n "${rc[1]}" ] && break
      [ -z "$failed_at" ] && [[ "${rc[0]}${rc[1]}" =~ [1-9] ]] && failed_at=$SECONDS
      [ -n "$failed_at" ] && [ $((SECONDS - failed_at)) -ge 15 ] && break
      sleep 0.1
    done
    for i in 0 1; do
      [ -n "${rc[$i]}" ] || { kill -9 "${A[$i]}" 2> /dev/null; wait "${A[$i]}" 2> /dev/null; rc[$i]=hung; }
    done
    mc_job_pids "MC_JOB=c10d$$" | xargs -r kill -9
    c10d="exit ${rc[0]} ${rc[1]}"
    grep -qh "connectFullMesh failed" "$W"/node[0-9].log && c10d+="; attempt 1 could not connect its Gloo mesh"
    finished=$(cd "$W/c10d" && ls done.* 2> /dev/null | tr '\n' ' ')
    echo "worker failure with --max-restarts 1: etcd-v3 agents $ours; c10d agents $c10d; c10d ranks finished: ${finished:-none}"
    # Ours ended 0 on both (checked above), which is no worse than whatever c10d did.
    ;;
  member)
    STEPS=4 HOLD_AT=2
    probe lead "$ENDPOINTS" 0 || mc_fail "member: could not make e0 the leader"
    agent 0 --nnodes 2; agent 1 --nnodes 2
    wait_held 2
    t0=$(mc_now); mc_kill9 "${E[0]}"; echo "killed etcd member e0 (the leader, first in every agent's list) while the job holds"
    ok=""
    for _ in $(seq 300); do probe heartbeats "$ENDPOINTS" "$RUN" "$t0" > "$W/beats" && { ok=1; break; }; sleep 0.2; done
    [ -n "$ok" ] && echo "after the kill: $(cat "$W/beats")" || mc_fail "member: agents did not heartbeat after e0 died: $(cat "$W/beats")"
    release
    for i in 0 1; do expect_exit "$i" 0; done
    expect_done 0 "2 0 node"; expect_done 1 "2 0 node"
    no_keys_left 0
    ;;
  nodelost)
    STEPS=4 HOLD_AT=2 HOLD_WORLD=3
    for i in 0 1 2; do agent "$i" --nnodes 2:3 --max-restarts 1; done
    wait_held 3
    read -r _ host0 < "$D/start.0.0"
    [ "$host0" = node0 ] || mc_fail "nodelost: rank 0 runs on '$host0', expected node0 (node rank 0)"
    mc_kill_node 0; echo "killed every process of node0 (node rank 0's agent and worker, etcd member e0) while the job holds"
    release
    for i in 1 2; do expect_exit "$i" 0; done
    # A survivor whose worker failed first restarts it on its budget (attempt 1); one whose worker was still
    # blocked when the other survivor came back to the rendezvous restarts it as a membership change (attempt
    # 0). Which comes first is a race inside torchrun's agent: either is its behaviour, the world of 2 is not.
    expect_done 0 "2 [01] node1"; expect_done 1 "2 [01] node2"
    no_keys_left 30
    ;;
  *) echo "unknown scenario $SCENARIO"; exit 2 ;;
esac
mc_expect_gone "$MARKER" 20
[ -n "${MC_SHOW:-}" ] && show_logs
[ "$MC_FAILS" = 0 ] || { show_logs; exit 1; }
echo "PASS $SCENARIO"
