#!/bin/bash
# Chaos: a fault of a random kind every EVERY seconds for DURATION seconds against one meshrun job, then
# the job's goodput ledger (docs/daemon.md#the-goodput-ledger) beside the job's own timing of its work
# (bench/faults/chaos_job.py times every step's start and end; each step counts once, the first time it is done, as
# redone steps are work lost). BEATS=0 runs the job without beats (the ledger then times it by its
# collectives). Root; network namespaces; not part of ctest.
#   nodes:  a standalone meshrun-rendezvous on node 4; agents on nodes 0-3 with --nnodes 2:3 (three train,
#           one waits as a hot spare); a node whose agent ended is started again and joins as a spare
#   faults: worker  kill -9 of one training worker
#           node    kill -9 of every process of a training node (its agent is started again 2 s later)
#           link    a training node's link cut for 8 s: the daemon declares it dead after its keep-alive;
#                   its agent either gives up on the rendezvous (it is started again once the link is
#                   back) or hears, once the link is back, that it was declared dead and re-joins
#           hang    SIGSTOP of one training worker (meshrun's stopped-worker verdict after --hang-floor)
#   bench/faults/chaos.sh   (env DURATION=900 EVERY=60 SEED=1 HANG_FLOOR=10 CKPT_EVERY=100 CKPT_SECONDS=0.5 BEATS=1)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MESHRUN=${MESHRUN:-$ROOT/build/bin/meshrun}
RDZV=${RDZV:-$ROOT/build/bin/meshrun-rendezvous}
VENV_BIN=$ROOT/.venv/bin
JOB=$ROOT/bench/faults/chaos_job.py
DURATION=${DURATION:-900} EVERY=${EVERY:-60} SEED=${SEED:-1} HANG_FLOOR=${HANG_FLOOR:-10}
CKPT_EVERY=${CKPT_EVERY:-100} CKPT_SECONDS=${CKPT_SECONDS:-0.5} BEATS=${BEATS:-1}
JOB_FLAGS=(); [ "$BEATS" = 0 ] && JOB_FLAGS=(--no-beats)
source "$ROOT/tests/cluster/cluster.sh"
mc_init 5
W=$MC_DIR/chaos; mkdir -p "$W"; chmod 777 "$W"
DAEMON_NODE=4 PORT=29741
RANDOM=$SEED
declare -a AGENT   # agent pid per node

mc_spawn "$DAEMON_NODE" "$W/daemon.log" "$RDZV" --host 0.0.0.0 --port "$PORT"
for _ in $(seq 100); do grep -q "listening" "$W/daemon.log" && break; sleep 0.1; done
UNTIL=$(awk -v t="$(mc_now)" -v d="$DURATION" 'BEGIN { printf "%.0f", t + d + 20 }')

agent() {   # agent I: (again) an agent on node I, its log appended to node<I>.log
  mc_spawn "$1" "$W/node$1.part" env PATH="$VENV_BIN:$PATH" OMP_NUM_THREADS=1 "$MESHRUN" --rdzv-backend c10d \
    --rdzv-endpoint "node$DAEMON_NODE:$PORT" --rdzv-id chaos --nnodes 2:3 --nproc-per-node 1 --max-restarts 1000 \
    --hang-floor "$HANG_FLOOR" --log-dir "$W/logs$1" "$JOB" "$W" "$UNTIL" "$CKPT_EVERY" "$CKPT_SECONDS" "${JOB_FLAGS[@]}"
  AGENT[$1]=$MC_PID
}
status_json() { mc_on "$DAEMON_NODE" "$RDZV" status --endpoint "127.0.0.1:$PORT" --json 2> /dev/null; }
training_nodes() { status_json | jq -r '.runs[0].nodes[]?.host' | sed 's/^node//'; }
# The node's training worker: the python process running chaos_job.py (not the agent, whose arguments name it too).
worker_pid() {
  local pids; pids=$(ip netns pids "$(mc_ns "$1")" | paste -sd,)
  [ -n "$pids" ] && ps -o pid=,args= -p "$pids" | awk '$2 ~ /python/ && /chaos_job.py/ { print $1; exit }'
}
revive() {   # revive I: start node I's agent again once the old one ended; one that re-joined stays
  local i=$1 _
  for _ in $(seq 200); do kill -0 "${AGENT[$i]}" 2> /dev/null || break; sleep 0.1; done
  if kill -0 "${AGENT[$i]}" 2> /dev/null; then
    echo "  node$i's agent is back: it re-joined once its link was (declared dead meanwhile)"
    return
  fi
  wait "${AGENT[$i]}" 2> /dev/null
  cat "$W/node$i.part" >> "$W/node$i.log"
  agent "$i"
}

for i in 0 1 2; do agent "$i"; done
for _ in $(seq 600); do [ -s "$W/steps.log" ] && break; sleep 0.1; done
agent 3
sleep 5
t_start=$(mc_now)
kinds=(worker node link hang)
declare -A done_kinds
time_left() { [ "$(awk -v e="$(mc_elapsed "$t_start")" -v d="$DURATION" 'BEGIN { print (e + 0 < d - 30) }')" = 1 ]; }
while time_left; do
  sleep "$EVERY"
  time_left || break   # no fault in the last 30 s: the job ends at DURATION + 20 s
  mapfile -t nodes < <(training_nodes)
  [ "${#nodes[@]}" -eq 0 ] && { echo "$(mc_elapsed "$t_start") s: no training node listed; skipping"; continue; }
  victim=${nodes[$((RANDOM % ${#nodes[@]}))]}
  kind=${kinds[$((RANDOM % 4))]}
  p=""
  if [ "$kind" = worker ] || [ "$kind" = hang ]; then
    p=$(worker_pid "$victim")
    [ -n "$p" ] || { echo "$(mc_elapsed "$t_start") s: $kind on node$victim: no worker there now; skipped"; continue; }
  fi
  done_kinds[$kind]=$((${done_kinds[$kind]:-0} + 1))
  echo "$(mc_elapsed "$t_start") s: $kind on node$victim"
  case $kind in
    worker) kill -9 "$p" ;;
    hang) kill -STOP "$p" ;;
    node) mc_kill_node "$victim"; sleep 2; revive "$victim" ;;
    link) mc_link_down "$victim"; sleep 8; mc_link_up "$victim"; revive "$victim" ;;
  esac
done
echo "faults: $(for k in "${!done_kinds[@]}"; do printf '%s %s, ' "$k" "${done_kinds[$k]}"; done | sed 's/, $//')"
for i in 0 1 2 3; do mc_wait_exit "${AGENT[$i]}" 180; cat "$W/node$i.part" >> "$W/node$i.log"; done

echo
echo "recoveries (each agent prints its restarts' ledgers, once per round):"
grep -h "recovery of round" "$W"/node*.log | sed 's/^meshrun: //' | awk '!seen[$4]++' | sort -k4,4n | sed 's/^/  /'
last=""   # the node that left last: its goodput.json is the final ledger (ended)
for i in 0 1 2 3; do jq -e '.ended' "$W/logs$i/chaos/goodput.json" > /dev/null 2>&1 && last=$i; done
[ -n "$last" ] || { echo "no final goodput ledger (goodput.json with ended=true) was written"; exit 1; }
ledger=$(jq -c . "$W/logs$last/chaos/goodput.json")
echo "ledger: $(grep -h "meshrun: goodput" "$W/node$last.log" | tail -1 | sed 's/^meshrun: //')"
echo "$ledger" | jq -r '"  wall \(.wall_s) s = productive \(.productive_s) + start-up \(.startup_s) + checkpoints \(.checkpoint_s) + other phases \(.other_phases_s) + hang waits \(.hang_wait_s) + restarts \(.restarts_s) (\(.restarts)) + work lost \(.work_lost_s) + shutdown \(.shutdown_s) + untold \(.untold_s) + in progress \(.in_progress_s); hot spares idle \(.spare_node_s) node-s"'
# The job's own timing: the sum of every step's duration (its start to its end, by the job's clock), each step
# number counted the first time it was done (a step done again after a restart is work lost, not goodput).
awk -v ledger="$(echo "$ledger" | jq -r '.productive_s')" -v wall="$(echo "$ledger" | jq -r '.wall_s')" '
  $1 == "step" { n = $2; if (!(n in done)) { done[n] = 1; productive += $4 - $3; steps++ } }
  END {
    printf "the job'"'"'s own timing: productive %.1f s in %d steps; the ledger says %.1f s (%+.1f s, %+.2f %% of the wall time)\n",
           productive, steps, ledger, ledger - productive, 100 * (ledger - productive) / wall
    printf "goodput: ledger %.1f %%, the job'"'"'s own %.1f %% of the ledger'"'"'s wall time\n", 100 * ledger / wall, 100 * productive / wall
  }' "$W/steps.log"
