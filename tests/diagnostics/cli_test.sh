#!/bin/bash
# `meshrun ping` / `meshrun check` end to end, against real processes on 127.0.0.1 only: a live daemon,
# a daemon whose --allow rejects us, a closed port, an unresolvable name, a real HTTP server, a real
# PyTorch TCPStore, and fake agents (duplicate rank, a missing node, a SIGSTOPped node).
# Usage: cli_test.sh MESHRUN DAEMON FAKE_AGENT PYTHON DOC
set -u
MESHRUN=$1 DAEMON=$2 AGENT=$3 PY=$4 DOC=$5
T=$(mktemp -d /tmp/meshrun-diag-XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT
FAILS=0
fail() { echo "FAILED: $*"; FAILS=$((FAILS + 1)); }
# run NAME EXPECTED_RC CMD...: runs CMD, output in $T/NAME.out, checks the exit status.
run() {
  local name=$1 want=$2; shift 2
  "$@" > "$T/$name.out" 2>&1; local rc=$?
  echo "== $name (rc=$rc)"; cat "$T/$name.out"
  [ "$rc" = "$want" ] || fail "$name: exit status $rc, expected $want"
}
has() { grep -qF -- "$2" "$T/$1.out" || fail "$1: output lacks '$2'"; }
lacks() { ! grep -qF -- "$2" "$T/$1.out" || fail "$1: output has '$2'"; }
# wait_line FILE PATTERN: waits (at most 30 s, a safety net) for PATTERN in FILE.
wait_line() { for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; fail "no '$2' in $1"; cat "$1"; return 1; }
start_daemon() {  # start_daemon NAME ARGS...: sets PORT
  local name=$1; shift
  "$DAEMON" --host 127.0.0.1 --port 0 --log-level warn "$@" > "$T/$name.log" 2>&1 & PIDS+=($!)
  wait_line "$T/$name.log" '^listening on' || exit 1
  PORT=$(head -1 "$T/$name.log" | sed 's/.*://')
}
agent() {  # agent NAME RUN HOST RANK NNODES [KEEP_ALIVE_S]: starts a fake agent, sets APID
  local name=$1; shift
  "$AGENT" "127.0.0.1:$DPORT" "$@" > "$T/$name.log" 2>&1 & APID=$!; PIDS+=($APID)
}

start_daemon daemon; DPORT=$PORT
EP=127.0.0.1:$DPORT

# --- ping: each failure class, named -------------------------------------------------------------
run ping_ok 0 "$MESHRUN" ping "$EP" -c 3 -i 0.1
has ping_ok "3 sent, 3 answered, 0.0% loss"; has ping_ok "meshrun-rendezvous"; has ping_ok "rtt min/avg/max/mdev"

CLOSED=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
run ping_refused 1 "$MESHRUN" ping "127.0.0.1:$CLOSED" -c 2 -i 0.1
has ping_refused "[refused]"; has ping_refused "2 sent, 0 answered, 100.0% loss"; has ping_refused "failures: 2 x refused"

run ping_resolve 1 "$MESHRUN" ping meshrun-no-such-host.invalid -c 1
has ping_resolve "[resolve]"; has ping_resolve "meshrun-no-such-host.invalid"

start_daemon allow --allow 10.0.0.0/8
run ping_rejected 1 "$MESHRUN" ping "127.0.0.1:$PORT" -c 1
has ping_rejected "[rejected]"; has ping_rejected "not allowed"

"$PY" -u -m http.server 0 --bind 127.0.0.1 --directory "$T" > "$T/http.log" 2>&1 & PIDS+=($!)
wait_line "$T/http.log" 'Serving HTTP' && HPORT=$(sed -n 's/.* port \([0-9]*\).*/\1/p' "$T/http.log" | head -1)
run ping_http 1 "$MESHRUN" ping "127.0.0.1:$HPORT" -c 1 -W 1
has ping_http "[not-a-store]"

# A real PyTorch TCPStore server: torch must import (scripts/setup.sh installs it into .venv).
"$PY" -c 'import torch.distributed' || fail "torch does not import in $PY: run scripts/setup.sh"
{
  "$PY" -u -c 'import torch.distributed as d, time
s = d.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
print("port", s.port, flush=True); time.sleep(120)' > "$T/torch.log" 2>&1 & PIDS+=($!)
  wait_line "$T/torch.log" '^port' && TPORT=$(awk '/^port/{print $2}' "$T/torch.log")
  run ping_tcpstore 0 "$MESHRUN" ping "127.0.0.1:$TPORT" -c 1
  has ping_tcpstore "[tcpstore]"; has ping_tcpstore "1 sent, 1 answered"
}

run ping_usage 2 "$MESHRUN" ping
run ping_usage2 2 "$MESHRUN" ping "$EP" -c 0
# A target that is no endpoint: worded as every meshrun error is (run_main), exit 2.
run ping_bad_port 2 "$MESHRUN" ping "127.0.0.1:99999999"
has ping_bad_port "meshrun ping: error:"

# --- check: the happy path and each rendezvous failure -------------------------------------------
agent good_a good host-a 0 2; agent good_b good host-b 1 2
wait_line "$T/good_a.log" '^joined'; wait_line "$T/good_b.log" '^joined'
run check_ok 0 "$MESHRUN" check --rdzv-endpoint "$EP" --rdzv-id good --bandwidth --bandwidth-mib 1
for c in "PASS endpoint.tcp" "PASS endpoint.daemon" "PASS endpoint.clock_skew" "PASS rdzv.nodes: 2 of 2" \
         "PASS rdzv.missing_ranks" "PASS rdzv.duplicate_ranks" "PASS rdzv.heartbeats" "PASS rdzv.master" \
         "PASS bandwidth.tcp" "GB/s" "verdict: "; do has check_ok "$c"; done
lacks check_ok "FAIL "

agent dup_a dup host-a 0 2; wait_line "$T/dup_a.log" '^joined'
agent dup_b dup host-b 0 2; DUPB=$APID
wait "$DUPB"; [ $? = 3 ] || fail "second agent with node rank 0 was not refused"
run check_dup 1 "$MESHRUN" check --rdzv-endpoint "$EP" --rdzv-id dup
has check_dup "FAIL rdzv.duplicate_ranks"; has check_dup "rank 0: host-a"; has check_dup "host-b"
has check_dup "verdict: FAIL"

agent half_a half host-a 0 2; wait_line "$T/half_a.log" '^joined'
run check_half 1 "$MESHRUN" check --rdzv-endpoint "$EP" --rdzv-id half --nnodes 2
has check_half "FAIL rdzv.nodes: 1 of 2 node(s) joined"; has check_half "FAIL rdzv.missing_ranks: node rank(s) 1"

# Stale: a node with a short keep-alive, frozen with SIGSTOP. Until the freeze nothing else may make it
# stale, so the checks before it poll for the verdict: a loaded machine can delay one heartbeat past
# 1.5 s, but a daemon that never counts this node as alive fails (the first case), and one that never
# notices the frozen node fails (the second). Neither depends on how fast the machine is.
# poll_check NAME PATTERN ARGS...: runs `meshrun check ARGS` until its output has PATTERN (at most 20 s).
poll_check() {
  local name=$1 pattern=$2; shift 2
  for _ in $(seq 100); do
    "$MESHRUN" check "$@" > "$T/$name.out" 2>&1
    grep -qF -- "$pattern" "$T/$name.out" && break
    sleep 0.2
  done
  echo "== $name"; cat "$T/$name.out"
}
agent stale_a stale frozen-host 0 2 1.5; STALE=$APID; wait_line "$T/stale_a.log" '^joined'
poll_check check_alive "PASS rdzv.heartbeats" --rdzv-endpoint "$EP" --rdzv-id stale
has check_alive "PASS rdzv.heartbeats"
kill -STOP "$STALE"
poll_check check_stale "FAIL rdzv.heartbeats" --rdzv-endpoint "$EP" --rdzv-id stale
has check_stale "FAIL rdzv.heartbeats: stale node(s): frozen-host"
kill -CONT "$STALE"

run check_ifname 1 env NCCL_SOCKET_IFNAME=meshrun-none0 "$MESHRUN" check
has check_ifname "FAIL host.nccl_socket_ifname: NCCL_SOCKET_IFNAME=meshrun-none0 names no interface"

run check_refused 1 "$MESHRUN" check --rdzv-endpoint "127.0.0.1:$CLOSED" --rdzv-id x
has check_refused "FAIL endpoint.tcp: [refused]"; lacks check_refused "rdzv."

run check_port 0 "$MESHRUN" check --port "$DPORT" --rdzv-endpoint "$EP"
has check_port "PASS host.ports: $DPORT held by the rendezvous daemon"
run check_port_busy 0 "$MESHRUN" check --port "$HPORT"
has check_port_busy "WARN host.ports: port $HPORT is in use by pid"

run check_usage 2 "$MESHRUN" check --nnodes x
run check_usage2 2 "$MESHRUN" check --rdzv-id good
has check_usage2 "meshrun check: error:"

# --- --json: exactly the fields docs/troubleshooting.md documents, with their types ---------------
run check_json 1 "$MESHRUN" check --rdzv-endpoint "$EP" --rdzv-id dup --json
"$PY" - "$T/check_json.out" "$DOC" <<'PYEOF' || fail "--json does not match the documented fields"
import json, re, sys
out, doc = json.load(open(sys.argv[1])), open(sys.argv[2]).read()
section = doc.split("### `meshrun check --json` fields", 1)[1]
section = re.split(r"^#{1,4} ", section, maxsplit=1, flags=re.M)[0]  # up to the next heading
documented = {}
for m in re.finditer(r"^\| `([^`]+)` \| (\w+) \|", section, re.M):
    documented[m.group(1)] = m.group(2)
check_names = set(re.findall(r"`((?:host|gpu|endpoint|rdzv|bandwidth)\.[a-z_]+)`", doc))
types = {"string": str, "integer": int, "number": (int, float), "object": dict, "array": list}
seen = {}
def walk(obj, prefix):
    for k, v in obj.items():
        path = prefix + k
        seen[path] = v
        if isinstance(v, dict) and path != "checks[].data":
            walk(v, path + ".")
        if isinstance(v, list) and path == "checks":
            for item in v:
                walk(item, "checks[].")
walk(out, "")
errors = []
for path in sorted(set(seen) - set(documented)):
    errors.append(f"undocumented field {path}")
for path in sorted(set(documented) - set(seen)):
    errors.append(f"documented field {path} missing from the output")
for path, t in documented.items():
    if path in seen and not isinstance(seen[path], types[t]):
        errors.append(f"{path} is {type(seen[path]).__name__}, documented as {t}")
for c in out["checks"]:
    if c["status"] not in ("PASS", "WARN", "FAIL"): errors.append(f"bad status {c['status']}")
    if c["name"] not in check_names: errors.append(f"check {c['name']} is not documented")
if out["verdict"] != "FAIL" or out["exit_code"] != 1: errors.append("verdict/exit_code wrong for a duplicate rank")
if not any(c["name"] == "rdzv.duplicate_ranks" and c["status"] == "FAIL" for c in out["checks"]):
    errors.append("rdzv.duplicate_ranks FAIL missing from --json")
print("\n".join(errors) if errors else f"--json matches the {len(documented)} documented fields")
sys.exit(1 if errors else 0)
PYEOF

echo "$FAILS failure(s)"
[ "$FAILS" = 0 ]
