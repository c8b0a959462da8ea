#!/bin/bash
# The etcd-v3 rendezvous on 3 node namespaces, each running a member of a real 3-member etcd cluster
# (Debian's etcd-server) and a meshrun agent; no meshrun daemon anywhere. Workers are a Gloo job that
# checkpoints every step (etcd_worker.py). One scenario per run; no timing is asserted, only behaviour.
#   member  an etcd member (the first endpoint every agent tries) is killed -9 mid-job: the job goes on
#           on the other two and completes on all three nodes, without a restart; the agents share a join
#           token, and the run's secret is in etcd only sealed with it
#   rank0   the agent of node rank 0 (which serves the workers' store) is killed -9, with --nnodes 2:3:
#           the survivors re-rendezvous, a new node rank 0 serves a fresh store, the job resumes from its
#           checkpoint with a world of 2 and completes
#   rank0node the same with every process of node rank 0's node killed -9 (agent, workers, its etcd member)
#   rank0link the same with node rank 0's link cut: the cut-off agent (its etcd member in the minority) stops
#   nomember every member is killed: the agents stop with an error naming the endpoints
# Each scenario checks that no process of the job is left on any node.
# Usage: etcd_test.sh SCENARIO MESHRUN VENV_BIN   (root; exits 77 when namespaces cannot be made)
SCENARIO=$1 MESHRUN=$2 VENV_BIN=$3
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/cluster.sh"
[ -x /usr/bin/etcd ] || { echo "FAILED: /usr/bin/etcd is missing: install etcd-server (scripts/setup.sh does)"; exit 1; }
mc_init 3
W=$MC_DIR/work; mkdir -p "$W"; cd "$W" || exit 1
D=$W/job; mkdir -p "$D"; chmod 777 "$D"
MARKER="MC_JOB=etcd$$"
ENDPOINTS="$(mc_ip 0):2379,$(mc_ip 1):2379,$(mc_ip 2):2379"
declare -a A E   # agent and etcd pid per node

etcd_up() { mc_etcd_up "$W"; }

# agent I ARGS...: meshrun on node I (1 worker), log in $W/node<I>.log.
agent() {
  local i=$1; shift
  mc_spawn "$i" "$W/node$i.log" env "$MARKER" MESHRUN_RDZV_TOKEN="${TOKEN:-}" PATH="$VENV_BIN:$PATH" ETCD_WORKER_HOLD_AT="${HOLD_AT:--1}" "$MESHRUN" --rdzv-backend etcd-v3 \
    --rdzv-endpoint "$ENDPOINTS" --rdzv-id "job$$" --nproc-per-node 1 --shutdown-timeout 2 --log-level info "$@" \
    "$HERE/etcd_worker.py" "$D" "$STEPS"
  A[$i]=$MC_PID
}
expect_exit() {   # expect_exit NODE RC
  mc_wait_exit "${A[$1]}" 120
  [ "$MC_RC" = "$2" ] || mc_fail "$SCENARIO: node$1's meshrun exited $MC_RC, expected $2"
}
wait_step() {   # wait_step N: until the job checkpointed step N (<= 90 s)
  for _ in $(seq 900); do [ "$(cat "$D/ckpt" 2> /dev/null || echo 0)" -ge "$1" ] && return 0; sleep 0.1; done
  mc_fail "$SCENARIO: the job did not reach step $1"; return 1
}
wait_held() {   # wait_held RANKS: until that many ranks hold at HOLD_AT (<= 90 s); the fault is injected then
  for _ in $(seq 900); do [ "$(mc_count_files "$D" '^held\.')" -ge "$1" ] && return 0; sleep 0.1; done
  mc_fail "$SCENARIO: only $(mc_count_files "$D" '^held\.') of $1 ranks held at step $HOLD_AT"; return 1
}
release() { touch "$D/release"; }
etcd_values() {  # every value the etcd cluster holds, one per line (read through node I's member's gateway)
  nsenter --net="/run/netns/$(mc_ns "$1")" "$VENV_BIN/python" - "$(mc_ip "$1")" << 'PY'
import base64, json, sys, urllib.request
everything = {"key": base64.b64encode(b"\0").decode(), "range_end": base64.b64encode(b"\0").decode()}
request = urllib.request.Request(f"http://{sys.argv[1]}:2379/v3/kv/range", json.dumps(everything).encode())
for kv in json.load(urllib.request.urlopen(request, timeout=10)).get("kvs", []):
    print(base64.b64decode(kv.get("value", "")).decode(errors="replace"))
PY
}
show_logs() { local i; for i in 0 1 2; do [ -f "$W/node$i.log" ] && { echo "--- node$i"; cat "$W/node$i.log"; }; done; }

etcd_up
case $SCENARIO in
  member)
    STEPS=25 HOLD_AT=5 TOKEN=etcd-token-$RANDOM$RANDOM
    agent 0 --nnodes 3; agent 1 --nnodes 3; agent 2 --nnodes 3
    wait_held 3
    values=$(etcd_values 1)
    grep -q '"secret":"sealed:' <<< "$values" || mc_fail "member: the run's secret is not sealed in etcd: $values"
    ! grep -q '"secret":"[0-9a-f]' <<< "$values" || mc_fail "member: the run's secret is in etcd in plain text"
    t0=$(mc_now); mc_kill9 "${E[0]}"; echo "killed etcd member e0 at step $(cat "$D/ckpt")"
    release
    for i in 0 1 2; do expect_exit "$i" 0; done
    echo "job finished $(mc_elapsed "$t0") s after the member died"
    for r in 0 1 2; do
      grep -qx "3 0 0" "$D/done.$r" 2> /dev/null || mc_fail "member: rank $r: done '$(cat "$D/done.$r" 2> /dev/null)', expected '3 0 0' (world 3, no restart)"
    done
    ;;
  rank0 | rank0node | rank0link)
    STEPS=40 HOLD_AT=5
    agent 0 --nnodes 2:3 --max-restarts 1; agent 1 --nnodes 2:3 --max-restarts 1; agent 2 --nnodes 2:3 --max-restarts 1
    wait_held 3
    mc_wait_for "$W/node0.log" "serving the workers' store" 5 > /dev/null || mc_fail "rank0: node0 is not node rank 0"
    t0=$(mc_now)
    case $SCENARIO in
      rank0) mc_kill9 "${A[0]}"; echo "killed node0's agent (node rank 0) at step $(cat "$D/ckpt")" ;;
      rank0node) mc_kill_node 0; echo "killed every process of node0 (node rank 0, its etcd member too) at step $(cat "$D/ckpt")" ;;
      rank0link) mc_link_down 0; echo "cut node0's link (node rank 0, its etcd member too) at step $(cat "$D/ckpt")" ;;
    esac
    release
    for i in 1 2; do expect_exit "$i" 0; done
    if [ "$SCENARIO" = rank0link ]; then
      expect_exit 0 1   # cut off with its etcd member in the minority: it stops, naming the endpoints
      grep -q "lost the rendezvous at etcd" "$W/node0.log" || mc_fail "rank0link: node0 does not say it lost etcd"
      mc_link_up 0
    fi
    echo "survivors finished $(mc_elapsed "$t0") s after node rank 0 died"
    # node2 is node rank 0 of the new round (survivors keep their node ranks where they can: node1 keeps 1,
    # node2's rank 2 is out of range in a world of 2, so it takes the free rank 0) and served a fresh store;
    # node1 served none; the job resumed with a world of 2.
    grep -q "round [1-9]: serving the workers' store" "$W/node2.log" ||
      mc_fail "rank0: node2 (node rank 2, the free rank 0 of a world of 2) did not serve the new round's store"
    ! grep -q "serving the workers' store" "$W/node1.log" ||
      mc_fail "rank0: node1 served a store, but it keeps node rank 1"
    for r in 0 1; do
      read -r world restarts first < "$D/done.$r" || { mc_fail "rank0: rank $r did not finish"; continue; }
      [ "$world" = 2 ] || mc_fail "rank0: rank $r finished in a world of $world, expected 2"
      [ "$restarts" -ge 1 ] || mc_fail "rank0: rank $r finished in round $restarts, expected a restart"
      [ "$first" -ge 5 ] || mc_fail "rank0: rank $r started from step $first, expected the checkpoint (>= 5)"
    done
    [ -e "$D/done.2" ] && mc_fail "rank0: a rank 2 finished, but the world after the restart has 2 ranks"
    # Without a daemon each agent keeps the run's goodput ledger as its node saw it: the restart, and a
    # worker that beats no steps.
    for i in 1 2; do
      grep -q "meshrun: goodput [0-9.]* % of .* (timed by its collectives: no step beats); badput: .*restarts [^,]* (1)" "$W/node$i.log" ||
        mc_fail "$SCENARIO: node$i printed no goodput ledger with one restart: $(grep 'goodput' "$W/node$i.log")"
    done
    ;;
  nomember)
    STEPS=1000
    agent 0 --nnodes 2; agent 1 --nnodes 2
    wait_step 3
    for i in 0 1 2; do mc_kill9 "${E[$i]}"; done
    t0=$(mc_now)
    for i in 0 1; do
      mc_wait_exit "${A[$i]}" 60
      [ "$MC_RC" != 0 ] && [ -n "$MC_RC" ] || mc_fail "nomember: node$i's meshrun exited '$MC_RC', expected a failure"
      grep -qF "lost the rendezvous at etcd $ENDPOINTS" "$W/node$i.log" || mc_fail "nomember: node$i does not name the etcd endpoints"
    done
    echo "agents stopped $(mc_elapsed "$t0") s after the last member died"
    ;;
  *) echo "unknown scenario $SCENARIO"; exit 2 ;;
esac
mc_expect_gone "$MARKER" 20
[ -n "${MC_SHOW:-}" ] && show_logs
[ "$MC_FAILS" = 0 ] || { show_logs; exit 1; }
echo "PASS $SCENARIO"
