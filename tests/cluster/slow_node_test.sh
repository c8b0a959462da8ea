#!/bin/bash
# A slow node replaced by a hot spare (--replace-slow-nodes): namespace nodes, one PyTorch Gloo rank each running
# tests/cluster/straggler_job.py (no meshrun code; equal work per step on every rank), node0's agent hosting the
# rendezvous; a spare joins once the round has closed. Once every rank has its straggler figure, node1's worker (and
# node2's in `twoslow`) is put in a CPU cgroup while it runs. The job runs for a fixed time from its first start
# (--for-job), so a restart does not lengthen it.
#   evict        3 nodes + 1 spare, no beats (stragglers from collective arrival times), the defaults (named slow
#                for 60 s): node1 is evicted with the rule's figures, the spare takes its node rank, node1 waits
#                cooling down (not a spare: status, its own line), /metrics counts the eviction, the job ends 0.
#   evict_beats  the same with beats (compute_s), --slow-node-after 20 (shorter than the default for the suite's
#                time; evict keeps the defaults).
#   twoslow      4 nodes + 1 spare, beats, the defaults, node1 and node2 limited at once: both named, no
#                eviction, and a line that says why; the job ends 0 on its four nodes.
#   evict_etcd   evict_beats with the etcd-v3 backend (one real etcd member on node0, no meshrun daemon): node rank 0's
#                agent judges from the progress keys, the run's state in etcd shows the spare seated and node1
#                cooling down, the job ends 0.
# Usage: slow_node_test.sh SCENARIO MESHRUN VENV_BIN   (root; exits 77 when namespaces cannot be made)
SCENARIO=$1 MESHRUN=$2 VENV_BIN=$3
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/cluster.sh"
case $SCENARIO in
  evict) SEATS=3 LIMITED=(1) PERCENT=25 FOR=140 EXTRA=() FIELD=arrival_compute_s ;;
  evict_beats) SEATS=3 LIMITED=(1) PERCENT=25 FOR=80 EXTRA=(--slow-node-after 20) FIELD=compute_s ;;
  twoslow) SEATS=4 LIMITED=(1 2) PERCENT=25 FOR=100 EXTRA=() FIELD=compute_s ;;
  evict_etcd) SEATS=3 LIMITED=(1) PERCENT=25 FOR=80 EXTRA=(--slow-node-after 20) FIELD=compute_s ;;
  *) echo "unknown scenario $SCENARIO"; exit 2 ;;
esac
mc_init $((SEATS + 1))
W=$MC_DIR/work; mkdir -p "$W"; cd "$W" || exit 1
RUN=slow$SCENARIO; D=$W/out; mkdir -p "$D"
PORT=29661 SPARE=$SEATS
RDZV_BIN=$(dirname "$MESHRUN")/meshrun-rendezvous
JOB=("$HERE/straggler_job.py" "$D" 1000000 40 --work --for-job=$FOR)
[ "$FIELD" = compute_s ] && JOB+=(--beats)
declare -a A
RDZV=(--rdzv-backend c10d --rdzv-endpoint "node0:$PORT")
if [ "$SCENARIO" = evict_etcd ]; then
  [ -x /usr/bin/etcd ] || { echo "FAILED: /usr/bin/etcd is missing: install etcd-server (scripts/setup.sh does)"; exit 1; }
  ETCD="http://$(mc_ip 0):2379"
  mc_spawn 0 "$W/etcd.log" etcd --name e0 --data-dir "$W/etcd" --listen-client-urls "$ETCD" --advertise-client-urls "$ETCD" \
    --listen-peer-urls "http://$(mc_ip 0):2380" --initial-advertise-peer-urls "http://$(mc_ip 0):2380" \
    --initial-cluster "e0=http://$(mc_ip 0):2380"
  for _ in $(seq 150); do mc_on 0 curl -sf --max-time 1 "$ETCD/health" > /dev/null && break; sleep 0.2; done
  RDZV=(--rdzv-backend etcd-v3 --rdzv-endpoint "$(mc_ip 0):2379")
fi

agent() {   # agent I ARGS...: meshrun on node I
  local i=$1; shift
  mc_spawn "$i" "$W/node$i.log" env MC_JOB=$RUN PATH="$VENV_BIN:$PATH" "$MESHRUN" "${RDZV[@]}" \
    --rdzv-id "$RUN" --nnodes "$SEATS" --nproc-per-node 1 --max-restarts 3 --standby-start now \
    --replace-slow-nodes "${EXTRA[@]}" "$@" "${JOB[@]}"
  A[$i]=$MC_PID
}
show_logs() { local i; for i in $(seq 0 "$SPARE"); do echo "--- node$i"; cat "$W/node$i.log"; done; }
# status_ok PYTHON_EXPR: the run's status (JSON, as `run`) makes the expression true; the status is kept in status.json.
status_ok() {
  mc_on 0 "$RDZV_BIN" status --endpoint "node0:$PORT" --json > "$W/status.json" 2> /dev/null || return 1
  "$VENV_BIN/python" -c "
import json, sys
runs = json.load(open('$W/status.json'))['runs']
run = runs[0] if runs else {}
ranks = [r for n in run.get('nodes', []) for r in n.get('ranks', [])]
sys.exit(0 if ($1) else 1)" 2> /dev/null
}
# etcd_ok PYTHON_EXPR: the run's keys in etcd (read through its JSON gateway) make the expression true, with `state`
# (the run record), `spares` (the w/ keys) and `ranks` (every progress key's ranks of the state's round); kept in
# status.json.
etcd_ok() {
  mc_on 0 "$VENV_BIN/python" -c "
import base64, json, sys, urllib.request
def keys(prefix):
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    body = json.dumps({'key': base64.b64encode(prefix.encode()).decode(), 'range_end': base64.b64encode(end.encode()).decode()})
    reply = json.load(urllib.request.urlopen(urllib.request.Request('$ETCD/v3/kv/range', body.encode()), timeout=5))
    return {base64.b64decode(kv['key']).decode(): base64.b64decode(kv.get('value', '')).decode() for kv in reply.get('kvs', [])}
base = '/meshrun/rdzv/$RUN/'
state = json.loads(keys(base + 'state').get(base + 'state', '{}'))
spares = keys(base + 'w/')
ranks = [r for v in keys(base + 'r/%d/p/' % state.get('round', 0)).values() for r in json.loads(v)]
json.dump({'state': state, 'spares': spares, 'ranks': ranks}, open('$W/status.json', 'w'))
sys.exit(0 if ($1) else 1)" 2> /dev/null
}
wait_status() {   # wait_status SECS WHAT PYTHON_EXPR (run's status, or etcd_ok's names under etcd)
  local i check=status_ok
  [ "$SCENARIO" = evict_etcd ] && check=etcd_ok
  for i in $(seq $(($1 * 2))); do "$check" "$3" && return 0; sleep 0.5; done
  mc_fail "$SCENARIO: $2 within $1 s: $(cat "$W/status.json" 2> /dev/null | head -c 600)"
  return 1
}

if [ "$SCENARIO" = evict_etcd ]; then
  for i in $(seq 0 $((SEATS - 1))); do agent "$i"; done
  wait_status 90 "the round did not close with $SEATS nodes" "state.get('phase') == 'closed' and len(state['members']) == $SEATS" || { show_logs; exit 1; }
  agent "$SPARE"
  wait_status 60 "the spare did not wait as one" "len(spares) == 1"
else
  agent 0 --rdzv-conf http_port=$((PORT + 1))
  for i in $(seq 1 $((SEATS - 1))); do agent "$i"; done
  wait_status 90 "the round did not close with $SEATS nodes" "run.get('state') == 'closed' and len(run['nodes']) == $SEATS" || { show_logs; exit 1; }
  agent "$SPARE"
  wait_status 60 "the spare did not wait as one" "run.get('spares') == 1"
fi
wait_status 90 "the ranks never got a $FIELD figure" "len(ranks) == $SEATS and min(r.get('$FIELD', 0) for r in ranks) > 0"
# The standby interpreters (--standby-start now: the nodes' cores are never idle here) import torch as the job
# starts (seconds of CPU on every node): the limit comes after they are ready, so that it alone sets a node apart.
for i in $(seq 0 $((SEATS - 1))); do
  mc_wait_for "$W/node$i.log" "standby workers: one per local rank" 90 > /dev/null ||
    mc_fail "$SCENARIO: node$i's standby workers were not ready within 90 s"
done
for i in "${LIMITED[@]}"; do
  worker=$(mc_worker_pid "$i" "python.*straggler_job.py") || mc_fail "$SCENARIO: no worker found on node$i"
  echo "LIMIT node$i's worker $worker to $PERCENT % of a core: $(tr '\0' ' ' < "/proc/$worker/cmdline" | cut -c1-120)"
  mc_cpu_limit "$worker" "$PERCENT" || mc_fail "$SCENARIO: cannot limit node$i's worker ($worker) to $PERCENT % of a core"
done
limited=$(mc_now)

if [ "$SCENARIO" = twoslow ]; then
  waited=$(mc_wait_for "$W/node0.log" "nodes are named slow at once" 90) ||
    mc_fail "$SCENARIO: no line saying why neither slow node is evicted within 90 s of the limits"
  echo "TWOSLOW: said why not $waited s after the limits: $(grep -h "slow node:" "$W/node0.log" | head -1)"
  status_ok "run.get('slow_node_evictions', 0) == 0 and 'named slow at once' in run.get('slow_nodes', '')" ||
    mc_fail "$SCENARIO: status does not show the reason, or shows an eviction"
  for i in $(seq 0 "$SPARE"); do
    mc_wait_exit "${A[$i]}" $((FOR + 90)); [ "$MC_RC" = 0 ] || mc_fail "$SCENARIO: node$i's meshrun exited $MC_RC"
  done
  grep -h "evicted for a spare" "$W"/node*.log && mc_fail "$SCENARIO: a node was evicted while two were slow"
  [ "$(mc_count_files "$D" '^done\.')" = "$SEATS" ] || mc_fail "$SCENARIO: $(mc_count_files "$D" '^done\.') of $SEATS ranks ended cleanly"
else
  waited=$(mc_wait_for "$W/node2.log" "evicted for a spare" $((FOR - 10))) ||
    mc_fail "$SCENARIO: node1 was not evicted within $((FOR - 10)) s of its limit"
  echo "EVICTED $SCENARIO: $waited s after the limit: $(grep -h "evicted for a spare" "$W/node2.log" | head -1)"
  grep -q "asks for a restart: node [0-9] (node1, pid [0-9]*) evicted for a spare: its ranks ran [0-9.]*x slower" "$W/node2.log" ||
    mc_fail "$SCENARIO: the eviction does not name node1 with its figures"
  mc_wait_for "$W/node1.log" "evicted as a slow node: not taken back, not even as a spare" 60 > /dev/null ||
    mc_fail "$SCENARIO: node1's agent did not say it cools down"
fi
if [ "$SCENARIO" = evict_etcd ]; then
  # The spare holds a seat, node1 is no member and cools down in the run's record, the restart says why.
  wait_status 60 "the spare did not take node1's seat, or node1 is not cooling down" "
state.get('phase') == 'closed' and sorted(n['host'] for n in state['members']) == ['node0', 'node2', 'node$SPARE'] and
[k.split('/')[0] for k in state.get('cooling', {})] == ['node1'] and state.get('cause') == 'slow_node' and
'evicted for a spare' in state.get('reason', '')"
  for i in 0 2 "$SPARE" 1; do
    mc_wait_exit "${A[$i]}" $((FOR + 90)); [ "$MC_RC" = 0 ] || mc_fail "$SCENARIO: node$i's meshrun exited $MC_RC"
  done
  [ "$(mc_count_files "$D" '^done\.')" = "$SEATS" ] || mc_fail "$SCENARIO: $(mc_count_files "$D" '^done\.') of $SEATS ranks ended cleanly"
  grep -q "not needed" "$W/node1.log" || mc_fail "$SCENARIO: node1 did not end as a node that was not needed"
elif [ "$SCENARIO" != twoslow ]; then
  # The spare holds a seat, node1 waits cooling down (not a spare), the record has the figures.
  wait_status 60 "the spare did not take node1's seat, or node1 is not cooling down" "
run.get('state') == 'closed' and 'node$SPARE' in [n['host'] for n in run['nodes']] and
[w['host'] for w in run['waiting']] == ['node1'] and run['waiting'][0]['cooldown_s'] > 1700 and run['spares'] == 0 and
run['slow_node_evictions'] == 1 and run['evictions'][0]['host'] == 'node1' and run['evictions'][0]['slowdown'] > 1.3 and
run['restarts_by_cause'].get('slow_node') == 1 and 'node$SPARE' in run['restarts'][-1]['replaced']"
  mc_on 0 "$VENV_BIN/python" -c "import urllib.request, sys; sys.stdout.write(urllib.request.urlopen('http://node0:$((PORT + 1))/metrics', timeout=10).read().decode())" > "$W/metrics.txt" ||
    mc_fail "$SCENARIO: no /metrics from the hosted daemon"
  grep -q "^meshrun_slow_node_evictions_total{run=\"$RUN\"} 1$" "$W/metrics.txt" ||
    mc_fail "$SCENARIO: /metrics does not count the eviction: $(grep slow_node "$W/metrics.txt")"
  for i in 0 2 "$SPARE" 1; do
    mc_wait_exit "${A[$i]}" $((FOR + 90)); [ "$MC_RC" = 0 ] || mc_fail "$SCENARIO: node$i's meshrun exited $MC_RC"
  done
  [ "$(mc_count_files "$D" '^done\.')" = "$SEATS" ] || mc_fail "$SCENARIO: $(mc_count_files "$D" '^done\.') of $SEATS ranks ended cleanly"
  grep -q "not needed" "$W/node1.log" || mc_fail "$SCENARIO: node1 did not end as a node that was not needed"
fi
mc_expect_gone "MC_JOB=$RUN" 20 && echo "$SCENARIO: no process of the job left on any node"
[ "$MC_FAILS" = 0 ] || show_logs
echo "$MC_FAILS failure(s)"
[ "$MC_FAILS" = 0 ]
