#!/bin/bash
# Stragglers named from when each rank entered its collectives, with no code in the script: two nodes
# (network namespaces), one PyTorch Gloo rank each, running tests/cluster/straggler_job.py (no beats, no
# compute_s), the agent of node0 hosting the rendezvous, the default --straggler-threshold. The namespaces
# share one clock, so a node's clock is put off with Debian's faketime (libfaketime preloaded):
#   skewed   node1's agent and worker run 7 s ahead; rank 0 (node0) computes 1.5x as long as rank 1.
#            Both agents name rank 0 as the straggler and never rank 1 (uncorrected, node1's 7 s would make
#            rank 1 look late at every collective), and status shows node1's clock +7 s from the daemon's.
#   healthy  node1's worker alone runs 5 s behind (its agent does not: the worker's offset from its agent
#            is measured too); equal compute over 300 steps: no straggler line on either node.
# Usage: straggler_test.sh SCENARIO MESHRUN VENV_BIN   (root; exits 77 when namespaces cannot be made)
SCENARIO=$1 MESHRUN=$2 VENV_BIN=$3
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/cluster.sh"
FAKETIME_LIB=/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1
[ -f "$FAKETIME_LIB" ] || { echo "FAILED: $FAKETIME_LIB is missing: install faketime (scripts/setup.sh does)"; exit 1; }
mc_init 2
W=$MC_DIR/work; mkdir -p "$W"; cd "$W" || exit 1
RUN=strag$SCENARIO; D=$W/out; mkdir -p "$D"
PORT=29641
RDZV_BIN=$(dirname "$MESHRUN")/meshrun-rendezvous
# Wall clock only: Gloo's and meshrun's deadlines use the monotonic clock, which stays true.
skew() { echo env LD_PRELOAD="$FAKETIME_LIB" FAKETIME="$1" FAKETIME_DONT_FAKE_MONOTONIC=1; }
declare -a A

# agent I PREFIX... -- ARGS: meshrun on node I (PREFIX: a command meshrun itself runs under, or nothing).
agent() {
  local i=$1; shift
  local prefix=()
  while [ "$1" != "--" ]; do prefix+=("$1"); shift; done; shift
  mc_spawn "$i" "$W/node$i.log" env MC_JOB=$RUN PATH="$VENV_BIN:$PATH" "${prefix[@]}" "$MESHRUN" \
    --rdzv-backend c10d --rdzv-endpoint "node0:$PORT" --rdzv-id "$RUN" --nnodes 2 --nproc-per-node 1 \
    --max-restarts 0 "$@"
  A[$i]=$MC_PID
}
expect_exit() {   # expect_exit NODE RC SECS
  mc_wait_exit "${A[$1]}" "$3"
  [ "$MC_RC" = "$2" ] || mc_fail "$SCENARIO: node$1's meshrun exited $MC_RC, expected $2"
}
show_logs() { local i; for i in 0 1; do [ -f "$W/node$i.log" ] && { echo "--- node$i"; cat "$W/node$i.log"; }; done; }
status_json() { mc_on 0 "$RDZV_BIN" status --endpoint "node0:$PORT" --json 2> /dev/null; }

case $SCENARIO in
  skewed)
    JOB=("$HERE/straggler_job.py" "$D" 100000 40 0 1.5)
    agent 0 -- "${JOB[@]}"
    agent 1 $(skew +7s) -- "${JOB[@]}"
    named=""
    for _ in $(seq 900); do   # <= 90 s
      [ "$(cat "$W/node0.log" "$W/node1.log" | grep -c "^meshrun: straggler: rank 0 on node0")" -ge 2 ] && { named=1; break; }
      sleep 0.1
    done
    [ -n "$named" ] || mc_fail "$SCENARIO: rank 0 was not named a straggler on both nodes within 90 s"
    status_json > "$W/status.json"
    "$VENV_BIN/python" - "$W/status.json" << 'PY' || mc_fail "$SCENARIO: status does not show node1's clock 7 s ahead"
import json, sys
nodes = {n["host"]: n for r in json.load(open(sys.argv[1]))["runs"] for n in r["nodes"]}
clock = {h: n.get("clock", {}) for h, n in nodes.items()}
print("CLOCKS", {h: round(c.get("offset_s", 0), 4) for h, c in clock.items()})
ok = clock["node1"].get("measured") and abs(clock["node1"]["offset_s"] - 7) < 0.5 and abs(clock["node0"]["offset_s"]) < 0.5
ranks = [r for n in nodes.values() for r in n.get("ranks", [])]
print("ARRIVAL_COMPUTE_MS", {r["rank"]: round(r.get("arrival_compute_s", 0) * 1e3, 1) for r in ranks})
sys.exit(0 if ok else 1)
PY
    grep -h "straggler" "$W"/node?.log | sed "s/^/SEEN: /" | head -4
    grep -q "^meshrun: straggler: rank 1" "$W"/node?.log && mc_fail "$SCENARIO: rank 1 was named a straggler"
    for i in 0 1; do
      grep -q "^meshrun: straggler: rank 0 on node0 computes .* between collectives" "$W/node$i.log" ||
        mc_fail "$SCENARIO: node$i did not print rank 0 as the straggler"
    done
    kill -TERM "${A[0]}" "${A[1]}" 2> /dev/null
    mc_wait_exit "${A[0]}" 60; mc_wait_exit "${A[1]}" 60 ;;
  healthy)
    JOB=("$HERE/straggler_job.py" "$D" 300 40)
    agent 0 -- "${JOB[@]}"
    agent 1 -- --no-python $(skew -5s) "$VENV_BIN/python" "${JOB[@]}"
    # While it runs, both ranks get a figure from their arrival times (the measure is on, not idle).
    measured=""
    for _ in $(seq 120); do
      status_json > "$W/status.json"
      "$VENV_BIN/python" - "$W/status.json" << 'PY' && { measured=1; break; }
import json, sys
ranks = [r for run in json.load(open(sys.argv[1]))["runs"] for n in run["nodes"] for r in n.get("ranks", [])]
figures = {r["rank"]: r.get("arrival_compute_s", 0) for r in ranks}
print("ARRIVAL_COMPUTE_MS", {k: round(v * 1e3, 1) for k, v in figures.items()})
sys.exit(0 if len(figures) == 2 and min(figures.values()) > 0 else 1)
PY
      sleep 0.5
    done > "$W/measured.txt"
    tail -1 "$W/measured.txt"
    [ -n "$measured" ] || mc_fail "$SCENARIO: the ranks never got a figure from their arrival times"
    expect_exit 0 0 180; expect_exit 1 0 60
    [ "$(mc_count_files "$D" '^done\.')" = 2 ] || mc_fail "$SCENARIO: $(mc_count_files "$D" '^done\.') of 2 ranks ended cleanly"
    grep -q "straggler" "$W"/node?.log && mc_fail "$SCENARIO: a straggler was named: $(grep -h straggler "$W"/node?.log | head -3)" ;;
  *) echo "unknown scenario $SCENARIO"; exit 2 ;;
esac
mc_expect_gone "MC_JOB=$RUN" 20 && echo "$SCENARIO: no process of the job left on any node"
[ "$MC_FAILS" = 0 ] || show_logs
echo "$MC_FAILS failure(s)"
[ "$MC_FAILS" = 0 ]
