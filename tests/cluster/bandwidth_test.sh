#!/bin/bash
# `meshrun check --bandwidth --peers 3` on 3 node namespaces against a meshrun-rendezvous on node0:
#   all      every instance joins: all 3 pairs measured, #0 prints the 3 x 3 matrix with node0..node2
#   missing  node2 never starts: node0 and node1 name #2 after --peers-timeout and measure their pair
#   cut      node1 and node2 cannot reach each other (iptables): that pair fails as [timeout], the others pass
# Figures are printed, never asserted. Usage: bandwidth_test.sh MESHRUN DAEMON  (root; 77 without namespaces)
MESHRUN=$1 DAEMON=$2
source "$(dirname "$0")/cluster.sh"
mc_init 3
W=$MC_DIR/work; mkdir -p "$W"; cd "$W" || exit 1
PORT=29731
mc_spawn 0 "$W/daemon.log" "$DAEMON" --host 0.0.0.0 --port "$PORT" --log-level warn
mc_wait_for "$W/daemon.log" "listening on" 30 > /dev/null || { mc_fail "daemon did not start"; cat "$W/daemon.log"; exit 1; }

# session NAME NODES ARGS...: one instance per listed node, started 0.2 s apart (so join order is node
# order); waits (bounded) for all; outputs in NAME.node<I>.out, exit statuses in RC[I].
declare -a RC
session() {
  local name=$1 nodes=$2 i pids=(); shift 2
  for i in $nodes; do
    mc_spawn "$i" "$W/$name.node$i.out" "$MESHRUN" check --rdzv-endpoint "node0:$PORT" --rdzv-id "$name" --peers 3 \
      --peer-mib 64 "$@"
    pids[$i]=$MC_PID; sleep 0.2
  done
  for i in $nodes; do
    mc_wait_exit "${pids[$i]}" 120; RC[$i]=$MC_RC
    echo "== $name on node$i (rc=${RC[$i]})"; grep -A20 "bandwidth\." "$W/$name.node$i.out"
  done
}
has() { grep -qF -- "$2" "$W/$1" || mc_fail "$1 lacks '$2'"; }

# 1. All three: one matrix, every cell measured, real node names and addresses.
session all "0 1 2"
for i in 0 1 2; do
  [ "${RC[$i]}" = 0 ] || mc_fail "all: node$i exited ${RC[$i]}"
  has all.node$i.out "PASS bandwidth.peers: 3 of 3 instances in session 'all'"
done
[ "$(grep -l "GB/s row->col" "$W"/all.node*.out | wc -l)" = 1 ] || mc_fail "all: expected exactly one matrix"
has all.node0.out "PASS bandwidth.pairs: 3 of 3 pair(s) measured in 3 round(s)"
has all.node0.out "#1 node1 10.231.0.2:"; has all.node0.out "#2 node2 10.231.0.3:"
for i in 0 1 2; do
  rows=$(grep -E "^    #$i node$i " "$W/all.node0.out" | awk '{ d = 0; n = 0; for (f = 3; f <= NF; f++) { if ($f == "-") d++; else if ($f ~ /^[0-9]+\.[0-9]+$/) n++ }
                                                       if (NF == 5 && d == 1 && n == 2) print }' | wc -l)
  [ "$rows" = 2 ] || mc_fail "all: the matrix rows of node$i are incomplete"
done

# 2. node2 never starts: named after the bounded wait, the pair that is there still measured.
t0=$(mc_now)
session missing "0 1" --peers-timeout 3
echo "DETECTION missing: both instances done after $(mc_elapsed "$t0") s"
for i in 0 1; do
  [ "${RC[$i]}" = 1 ] || mc_fail "missing: node$i exited ${RC[$i]}, expected 1"
  has missing.node$i.out "FAIL bandwidth.peers: only 2 of 3 instances took part in session 'missing'"
  has missing.node$i.out "#2 never joined; present: #0 node0 10.231.0.1:"
  has missing.node$i.out "PASS bandwidth.pairs:"
done
has missing.node0.out "1 of 1 pair(s) measured"

# 3. node1 and node2 cut off from each other (both still reach the daemon on node0).
mc_partition 1 2
session cut "0 1 2"
mc_heal 1 2
for i in 0 1 2; do [ "${RC[$i]}" = 1 ] || mc_fail "cut: node$i exited ${RC[$i]}, expected 1"; done
has cut.node0.out "FAIL bandwidth.pairs: 2 of 3 pair(s) measured"
grep -qE "x #1 node1 <-> #2 node2: \[timeout\]" "$W/cut.node0.out" || mc_fail "cut: the 1-2 pair is not reported as [timeout]"
has cut.node0.out "PASS bandwidth.peers: 3 of 3"

echo "$MC_FAILS failure(s)"
[ "$MC_FAILS" = 0 ]
