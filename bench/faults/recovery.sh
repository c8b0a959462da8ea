#!/bin/bash
# Recovery after a fault, meshrun and torchrun side by side on the same harness (root; network namespaces; not part
# of ctest). The job is bench/faults/recovery_job.py (PyTorch Gloo DDP, one rank per node, a checkpoint every 10 steps);
# the fault comes at step KILL_AT (with standbys on: once they are up) and under meshrun the job runs until the bench
# stops it, once it stepped again and the ledger is out (STEPS is torchrun's); the figure is the seconds from the fault to the first step of the restarted job,
# read from the job's own log (bench/faults/recovery_job.py), not from the launchers.
#   FAULT=node    the node of node rank VICTIM killed whole (kill -9 of every process in its namespace)
#   FAULT=worker  only its worker killed (kill -9 of the script's process)
#   FAULT=link    its cable pulled at the switch (the node is cut off; its agent and worker live on)
#   STANDBY=on    meshrun's default: standby workers (docs/multi-node.md#standby-workers); off: --no-standby
#   meshrun:  a standalone meshrun-rendezvous on a fifth node; four agents with --nnodes 2:3: three train,
#             one waits as a hot spare; each trial also prints the agents' recovery ledger
#             (docs/daemon.md#the-recovery-ledger) and whether the restart started from standby workers
#   torchrun: PyTorch's TCPStore alone on the fifth node (the c10d rendezvous store); three agents with
#             --nnodes 2:3 (torchrun has no spares); a node that does not host the store is killed; the job
#             continues on two nodes
#   bench/faults/recovery.sh  (env TRIALS=20 TORCHRUN_TRIALS=3 KILL_AT=30 STEPS=45 VICTIM=1 FAULT=node STANDBY=on;
#                       TORCHRUN_TRIALS=0 skips torchrun)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MESHRUN=${MESHRUN:-$ROOT/build/bin/meshrun}
RDZV=${RDZV:-$ROOT/build/bin/meshrun-rendezvous}
VENV_BIN=$ROOT/.venv/bin
JOB=$ROOT/bench/faults/recovery_job.py
TRIALS=${TRIALS:-20} TORCHRUN_TRIALS=${TORCHRUN_TRIALS:-3} KILL_AT=${KILL_AT:-30} STEPS=${STEPS:-45} VICTIM=${VICTIM:-1}
FAULT=${FAULT:-node} STANDBY=${STANDBY:-on}
STANDBY_FLAG=(); [ "$STANDBY" = off ] && STANDBY_FLAG=(--no-standby)
source "$ROOT/tests/cluster/cluster.sh"
mc_init 5
W=$MC_DIR/bench; mkdir -p "$W"; chmod 777 "$W"
STORE_NODE=4 PORT=29731

# step_count OUT: the last step logged (-1 before any).
last_step() { tail -1 "$1/steps.log" 2> /dev/null | awk '{print $2}' | grep . || echo -1; }
wait_step() {   # wait_step OUT N: until step N was logged (<= 120 s); rc 1 otherwise
  for _ in $(seq 2400); do [ "$(last_step "$1")" -ge "$2" ] && return 0; sleep 0.05; done
  return 1
}
# recovered OUT T0 RESTART: seconds from T0 to the first step logged by a later restart count than RESTART.
recovered() {
  awk -v t0="$2" -v r="$3" '$1 == "step" && $4 > r { printf "%.2f\n", $3 - t0; exit }' "$1/steps.log"
}
wait_exit_all() { local p; for p in "$@"; do mc_wait_exit "$p" 180; done; }
wait_step_after() {   # wait_step_after OUT RESTART: until a step of a later restart count was logged (<= 120 s)
  for _ in $(seq 2400); do awk -v r="$2" '$1 == "step" && $4 > r { f = 1 } END { exit !f }' "$1/steps.log" && return 0; sleep 0.05; done
  return 1
}
inject_fault() {   # inject_fault NODE: FAULT on that node
  case "$FAULT" in
    node) mc_kill_node "$1" ;;
    worker) ps -o pid=,args= -p "$(ip netns pids "$(mc_ns "$1")" | paste -sd,)" 2> /dev/null |
      awk '$2 ~ /python/ && /recovery_job.py/ { print $1 }' | xargs -r kill -9 ;;
    link) mc_link_down "$1" ;;
    *) echo "FAULT=$FAULT: expected node, worker or link" >&2; exit 2 ;;
  esac
}
stats() {   # stats FILE LABEL: p50, p95, min, max of the numbers in FILE
  sort -n "$1" | awk -v l="$2" '{ v[NR] = $1 } END {
    if (NR == 0) { print l ": no successful trial"; exit }
    p50 = v[int((NR + 1) / 2)]; i95 = int(0.95 * NR + 0.999); if (i95 > NR) i95 = NR
    printf "%s: %d trials, fault to first step p50 %.2f s, p95 %.2f s (min %.2f, max %.2f)\n", l, NR, p50, v[i95], v[1], v[NR] }'
}

meshrun_trial() {   # meshrun_trial N
  local out=$W/m$1 i p=()
  rm -rf "$out"; mkdir -p "$out"; chmod 777 "$out"
  for i in 0 1 2 3; do
    mc_spawn "$i" "$out/node$i.log" env PATH="$VENV_BIN:$PATH" OMP_NUM_THREADS=1 "$MESHRUN" --rdzv-backend c10d \
      --rdzv-endpoint "node$STORE_NODE:$PORT" --rdzv-id "m$1" --nnodes 2:3 --nproc-per-node 1 --max-restarts 3 \
      "${STANDBY_FLAG[@]}" "$JOB" "$out" 1000000 10
    p+=("$MC_PID")
    [ "$i" = 2 ] && { wait_step "$out" 1 || { echo "trial $1: no step"; return 1; }; }   # node3 joins last: the spare
  done
  wait_step "$out" "$KILL_AT" || { echo "trial $1: step $KILL_AT not reached"; return 1; }
  # A fault comes once the standbys are up (minutes into a real job; here they still import at step 30 on 2 cores).
  if [ "$STANDBY" = on ]; then
    for _ in $(seq 1200); do
      [ "$(grep -l "^meshrun: standby workers: " "$out"/node[0-2].log 2> /dev/null | wc -l)" = 3 ] && break
      sleep 0.05
    done
  fi
  local t0; t0=$(mc_now); inject_fault "$VICTIM"
  echo "$t0" > "$out/fault_at"   # for a look at one trial (MC_KEEP=1 keeps the folder)
  # The job runs until stopped: once it stepped again and the agents printed the ledger, the trial ends.
  wait_step_after "$out" 0 || true
  [ "$FAULT" = link ] && mc_link_up "$VICTIM"
  for _ in $(seq 200); do grep -q "recovery of round 1" "$out"/node[0-3].log && break; sleep 0.05; done
  kill -TERM "${p[@]}" 2> /dev/null
  wait_exit_all "${p[@]}"
  local s; s=$(recovered "$out" "$t0" 0)
  local ledger; ledger=$(grep -h "recovery of round 1" "$out"/node[0-3].log | head -1 | sed 's/^meshrun: //')
  local standby; standby=$(grep -l "started from standby workers" "$out"/node[0-3].log 2> /dev/null | wc -l)
  echo "meshrun trial $1: ${s:-no recovery} s; ${ledger:-no ledger}; nodes restarted from standbys: $standby"
  [ -n "$s" ] || for i in 0 1 2 3; do echo "--- node$i"; tail -8 "$out/node$i.log"; done
  [ -n "$s" ] && echo "$s" >> "$W/meshrun.txt"
}

torchrun_trial() {   # torchrun_trial N
  local out=$W/t$1 i p=() victim=2
  rm -rf "$out"; mkdir -p "$out"; chmod 777 "$out"
  for i in 0 1 2; do
    mc_spawn "$i" "$out/node$i.log" env PATH="$VENV_BIN:$PATH" OMP_NUM_THREADS=1 "$VENV_BIN/torchrun" \
      --rdzv-backend c10d --rdzv-endpoint "node$STORE_NODE:$PORT" --rdzv-id "t$1" --nnodes 2:3 --nproc-per-node 1 \
      --max-restarts 3 "$JOB" "$out" "$STEPS" 10
    p+=("$MC_PID")
  done
  wait_step "$out" "$KILL_AT" || { echo "trial $1: step $KILL_AT not reached"; return 1; }
  local t0; t0=$(mc_now); mc_kill_node "$victim"
  wait_exit_all "${p[@]}"
  local s; s=$(recovered "$out" "$t0" 0)
  echo "torchrun trial $1: ${s:-no recovery} s"
  [ -n "$s" ] && echo "$s" >> "$W/torchrun.txt"
}

echo "meshrun: $TRIALS trials; standalone daemon on node$STORE_NODE, 3 nodes + 1 spare, fault $FAULT on node rank $VICTIM at step $KILL_AT, standby workers $STANDBY"
mc_spawn "$STORE_NODE" "$W/daemon.log" "$RDZV" --host 0.0.0.0 --port "$PORT"
DAEMON=$MC_PID
for n in $(seq "$TRIALS"); do meshrun_trial "$n"; done
kill "$DAEMON"; wait "$DAEMON" 2> /dev/null
if [ "$TORCHRUN_TRIALS" -gt 0 ]; then
  echo "torchrun: $TORCHRUN_TRIALS trials; PyTorch TCPStore alone on node$STORE_NODE, 3 nodes, node2 killed at step $KILL_AT"
  mc_spawn "$STORE_NODE" "$W/store.log" "$VENV_BIN/python" -c "
import time, datetime, torch.distributed as d
s = d.TCPStore('0.0.0.0', $PORT, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(hours=1))
time.sleep(1e6)"
  STORE=$MC_PID
  sleep 3
  for n in $(seq "$TORCHRUN_TRIALS"); do torchrun_trial "$n"; done
  kill "$STORE"
fi
echo
stats "$W/meshrun.txt" "meshrun (spare takes the node's rank)"
if [ "$TORCHRUN_TRIALS" -gt 0 ]; then stats "$W/torchrun.txt" "torchrun (continues on 2 nodes)"; fi
