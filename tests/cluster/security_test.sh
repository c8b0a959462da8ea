#!/bin/bash
# What a job opens, held against docs/security.md: meshrun-trainer (tiny config, one rank per node, copies in
# memory every 5 steps) on two agent nodes with a join token, meshrun-rendezvous on a third with its live view,
# every node on two networks (eth0, the job's; eth1, another). The job is held after step 12 (the trainer's
# test hook) while the test looks; then released, it must end 0. One scenario per run:
#   sockets   every listening socket of every process of the job, on every node (ss), is one docs/security.md
#             names, bound as it says: the copy port on eth0's address only (and it is not reachable on
#             eth1's), Gloo on eth0's; the Unix sockets in a folder of mode 0700
#   stranger  a process on node1 that is not part of the run, holding node0's copy port and the run id, asks
#             for rank 0's copy without the run's secret and with a made-up proof: refused both times, with a
#             bare "refused"; the live page, /api/status and /metrics hold neither the join token nor any run
#             secret (64 hex digits)
# Usage: security_test.sh SCENARIO MESHRUN RENDEZVOUS TRAINER CONFIG_DIR DOCS_DIR  (root; exits 77 without namespaces)
SCENARIO=$1 MESHRUN=$2 RDZV=$3 TRAINER=$4 CONFIGS=$5 DOCS=$6
source "$(dirname "$0")/cluster.sh"
mc_init 3
mc_add_net eth1 10.232.0
W=$MC_DIR/work; mkdir -p "$W"; cd "$W" || exit 1
chmod 777 "$W"
PORT=29741 HTTP=29742 DAEMON=2 RUN=sec TOKEN="join-token-$$-for-the-security-test"
MARKER="MC_JOB=security$$"
OUT=$W/job; mkdir -p "$OUT/hold"
declare -a A
echo "$TOKEN" > "$W/token"; chmod 600 "$W/token"

mc_spawn "$DAEMON" "$W/daemon.log" "$RDZV" --host 0.0.0.0 --port "$PORT" --http-port "$HTTP" --token-file "$W/token"
for _ in $(seq 100); do grep -q "listening" "$W/daemon.log" && break; sleep 0.1; done
for i in 0 1; do
  mc_spawn "$i" "$W/node$i.log" env "$MARKER" MESHRUN_RDZV_TOKEN="$TOKEN" OMP_NUM_THREADS=1 \
    MESHRUN_TRAINER_HOLD_AFTER_STEP="12:$OUT/hold" "$MESHRUN" --rdzv-backend c10d \
    --rdzv-endpoint "node$DAEMON:$PORT" --rdzv-id "$RUN" --nnodes 2 --nproc-per-node 1 --log-level info \
    --no-python "$TRAINER" --config "$CONFIGS/tiny.json" --set "output.dir=\"$OUT\"" --set train.sample_tokens=0 \
    --set train.steps=30 --set train.global_batch_size=12 --set checkpoint.memory_interval=5
  A[$i]=$MC_PID
done
for _ in $(seq 900); do [ "$(mc_count_files "$OUT/hold" '^held\.12\.')" -ge 2 ] && break; sleep 0.1; done
[ "$(mc_count_files "$OUT/hold" '^held\.12\.')" -ge 2 ] || mc_fail "$SCENARIO: the job never held after step 12"
# The copies of step 10 have reached their buddies (the agents say so), so the copy ports are open and used.
for i in 0 1; do
  mc_wait_for "$W/node$i.log" "copy of step 10 is on node" 30 > /dev/null || mc_fail "$SCENARIO: node$i's copy of step 10 never reached its buddy"
done
copy_port() { sed -n "s/.*memory: copy port $(mc_ip "$1"):\([0-9]*\) open.*/\1/p" "$W/node$1.log" | tail -1; }
documented() { grep -qF "| \`$1\` |" "$DOCS/security.md"; }

case $SCENARIO in
  sockets)
    classes=()
    for i in 0 1 2; do
      # "LISTEN 0 16 10.231.0.1:41234 0.0.0.0:* users:(("meshrun",pid=7,fd=9))": address, port, program
      while read -r local prog; do
        addr=${local%:*} port=${local##*:}
        class=""
        case $prog in
          meshrun-rendez*)
            if [ "$port" = "$PORT" ]; then class="rendezvous port"
            elif [ "$port" = "$HTTP" ]; then class="live view"
            else class="run store port"; fi ;;
          meshrun)
            [ "$port" = "$(copy_port "$i")" ] && class="copy port"
            [ "$class" = "copy port" ] && [ "$addr" != "$(mc_ip "$i")" ] &&
              mc_fail "$SCENARIO: node$i's copy port listens on $addr, not only on eth0's $(mc_ip "$i")" ;;
          meshrun-trainer)
            class="Gloo pair port"
            [ "$addr" = "$(mc_ip "$i")" ] || mc_fail "$SCENARIO: node$i's Gloo port listens on $addr, not on eth0's $(mc_ip "$i")" ;;
        esac
        if [ -z "$class" ]; then
          mc_fail "$SCENARIO: node$i: $prog listens on $local, a socket docs/security.md does not name"
          continue
        fi
        documented "$class" || mc_fail "$SCENARIO: docs/security.md has no row for the $class"
        classes+=("$class")
        echo "SOCKET node$i $prog $local: $class"
      done < <(mc_on "$i" ss -ltnpH | awk '{ match($0, /users:\(\("[^"]+"/); p = substr($0, RSTART + 9, RLENGTH - 10); print $4, p }')
      # Unix sockets of the agents: in meshrun's private folder, mode 0700.
      while read -r path; do
        dir=$(dirname "$path")
        [ "$(stat -c %a "$dir")" = 700 ] || mc_fail "$SCENARIO: node$i's $path is in a folder of mode $(stat -c %a "$dir"), not 0700"
        case $path in
          *.sock.hook) class="hook socket" ;;
          *.sock.fr) class="report socket" ;;
          */memory.sock) class="memory handover socket" ;;
          *.sock) class="progress socket" ;;
          *) class="" ;;
        esac
        [ -n "$class" ] && documented "$class" || mc_fail "$SCENARIO: node$i: the Unix socket $path is not one docs/security.md names"
        classes+=("$class")
      done < <(mc_on "$i" ss -xapH | grep -E '"(meshrun|meshrun-trainer)"' | awk '{ print $5 }' | grep '^/' | sort -u)
    done
    for want in "rendezvous port" "run store port" "live view" "copy port" "Gloo pair port" "progress socket" \
      "report socket" "memory handover socket"; do
      printf '%s\n' "${classes[@]}" | grep -qx "$want" || mc_fail "$SCENARIO: no $want was seen: the inventory saw too little"
    done
    # The copy port is not reachable on the other network, only on the job's.
    p0=$(copy_port 0)
    mc_on 1 nc -z -w 2 "$(mc_ip 0)" "$p0" || mc_fail "$SCENARIO: node0's copy port is not reachable on eth0"
    mc_on 1 nc -z -w 2 10.232.0.1 "$p0" && mc_fail "$SCENARIO: node0's copy port is reachable on eth1's address"
    ;;
  stranger)
    p0=$(copy_port 0)
    [ -n "$p0" ] || mc_fail "$SCENARIO: node0 printed no copy port"
    # The frame protocol by hand: uint32 little-endian length, then JSON (launcher/memory/peer_link.hpp).
    answers=$(mc_on 1 python3 - "$(mc_ip 0)" "$p0" "$RUN" << 'PY'
import json, socket, struct, sys
host, port, run = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def frame(sock, message=None):
    if message is not None:
        body = json.dumps(message).encode()
        sock.sendall(struct.pack("<I", len(body)) + body)
        return None
    head = sock.recv(4, socket.MSG_WAITALL)
    return json.loads(sock.recv(struct.unpack("<I", head)[0], socket.MSG_WAITALL))
for proof in (None, "0" * 64):
    s = socket.create_connection((host, port), timeout=10)
    hello = frame(s)
    request = {"op": "fetch", "run": run, "rank": 0, "step": 10}
    if proof:
        request.update(client_nonce="1" * 32, proof=proof)
    frame(s, request)
    print(json.dumps({"hello": hello, "answer": frame(s)}))
PY
    )
    echo "STRANGER: $answers"
    # Refused both times, and told nothing: the hello is a nonce alone, the answer a bare "refused".
    [ "$(echo "$answers" | grep -c '^{"hello": {"nonce": "[0-9a-f]*"}, "answer": {"error": "refused"}}$')" = 2 ] ||
      mc_fail "$SCENARIO: the stranger was not refused twice with nothing more said: $answers"
    grep -q "refused .*: it did not prove the run's secret" "$W/node0.log" || mc_fail "$SCENARIO: node0 did not log the refusals"
    for target in / /api/status /metrics; do
      body=$(mc_on "$DAEMON" curl -sf "http://127.0.0.1:$HTTP$target")
      [ -n "$body" ] || mc_fail "$SCENARIO: $target answered nothing"
      echo "$body" | grep -qF "$TOKEN" && mc_fail "$SCENARIO: $target shows the join token"
      echo "$body" | grep -qE '[0-9a-f]{64}' && mc_fail "$SCENARIO: $target shows 64 hex digits (a run's secret?)"
    done
    mc_on "$DAEMON" curl -sf "http://127.0.0.1:$HTTP/" | grep -q 'never a join token or a run' ||
      mc_fail "$SCENARIO: the page does not say what it exposes"
    ;;
  *) echo "unknown scenario $SCENARIO"; exit 2 ;;
esac

touch "$OUT/hold/release.12"
for i in 0 1; do
  mc_wait_exit "${A[$i]}" 120
  [ "$MC_RC" = 0 ] || mc_fail "$SCENARIO: node$i's meshrun exited $MC_RC after the release, expected 0"
done
mc_expect_gone "$MARKER" 20 && echo "$SCENARIO: no process of the job left on any node"
if [ "$MC_FAILS" != 0 ]; then
  for f in "$W"/node?.log "$W/daemon.log"; do echo "--- $(basename "$f")"; tail -40 "$f"; done
fi
echo "$MC_FAILS failure(s)"
[ "$MC_FAILS" = 0 ]
