#!/bin/bash
# Networks that are not simple, with real meshrun agents and PyTorch Gloo workers on 2 node namespaces.
# One scenario per run:
#   ipv6     the nodes' network is IPv6 only. meshrun-rendezvous --host :: --allow fd31:231::/64 answers
#            `meshrun ping` and `meshrun check` from the other node at [fd31:231::1]:PORT and rejects a peer
#            outside the rule; then a job whose agent hosts the rendezvous at [fd31:231::1]:PORT (on [::]):
#            the store and a Gloo all-reduce over IPv6, MASTER_ADDR the bare address
#   nodns    the nodes' host names resolve nowhere (no /etc/hosts entry, no DNS server in reach): a job
#            given IP addresses runs end to end, and the daemon knows each node by its address
#   twonets  two networks between the nodes: the endpoint is on the first (eth0); the host names lead to
#            the second (eth1), which drops TCP. The workers get GLOO_SOCKET_IFNAME=eth0 (and
#            NCCL_SOCKET_IFNAME==eth0) and all-reduce over it; a user's own values are kept; --local-addr
#            on the second network selects eth1
# Usage: network_test.sh SCENARIO MESHRUN DAEMON PYTHON   (root; exits 77 when namespaces cannot be made)
SCENARIO=$1 MESHRUN=$2 DAEMON=$3 PY=$4
WORKER=$(cd "$(dirname "$0")" && pwd)/net_worker.py
[ "$SCENARIO" = ipv6 ] && export MC_FAMILY=6
source "$(dirname "$0")/cluster.sh"
"$PY" -c "import torch.distributed" 2> /dev/null || skip_or_fail "$PY cannot import torch (scripts/setup.sh makes .venv)"
mc_init 2
W=$MC_DIR/work; mkdir -p "$W"; cd "$W" || exit 1
PORT=29851
declare -a RC
JOB_ENV=()

# job NAME ENDPOINT [WORKER FLAGS]: one agent per node running net_worker.py (1 worker each); waits (<= 60 s)
# for both. JOB_ENV (array) is set in the agents' environment; with LOCAL_NET set, node I's agent gets
# --local-addr LOCAL_NET.(I+1). Logs in NAME.node<I>.log, exit statuses in RC[I], records in NAME/r<RANK>.
# job_start and job_wait are its two halves.
declare -a JOB_PIDS
job_start() {
  local name=$1 endpoint=$2 i extra; shift 2
  mkdir -p "$W/$name"
  for i in 0 1; do
    extra=(); [ -n "${LOCAL_NET:-}" ] && extra=(--local-addr "$LOCAL_NET.$((i + 1))")
    mc_spawn "$i" "$W/$name.node$i.log" env PYTHON_EXEC="$PY" "${JOB_ENV[@]}" "$MESHRUN" --rdzv-backend c10d \
      --rdzv-endpoint "$endpoint" --rdzv-id "$name" --nnodes 2 --nproc-per-node 1 --log-level info "${extra[@]}" \
      "$WORKER" "$W/$name" "$@"
    JOB_PIDS[$i]=$MC_PID
  done
}
job_wait() {
  local i
  for i in 0 1; do
    mc_wait_exit "${JOB_PIDS[$i]}" 60; RC[$i]=$MC_RC
    if [ "${RC[$i]}" != 0 ]; then mc_fail "$1: node$i's meshrun exited ${RC[$i]}"; cat "$W/$1.node$i.log"; fi
  done
}
job() { job_start "$@"; job_wait "$1"; }
# rec NAME RANK KEY=VALUE: the worker of RANK in job NAME recorded exactly that.
rec() {
  grep -qxF -- "$3" "$W/$1/r$2" 2> /dev/null ||
    mc_fail "$1: rank $2 recorded '$(grep -s "^${3%%=*}=" "$W/$1/r$2" || echo 'nothing')', expected '$3'"
}
has() { grep -qF -- "$2" "$W/$1" || { mc_fail "$1 lacks '$2'"; cat "$W/$1"; }; }
start_daemon() {   # start_daemon PORT ARGS...: meshrun-rendezvous on node0
  local port=$1; shift
  mc_spawn 0 "$W/daemon.log" "$DAEMON" --port "$port" --log-level warn "$@"
  mc_wait_for "$W/daemon.log" "listening on" 10 > /dev/null || { mc_fail "the daemon did not start"; cat "$W/daemon.log"; }
}

t0=$(mc_now)
case $SCENARIO in
  ipv6)
    E="[$(mc_ip 0)]"
    # 1. The daemon on :: (dual-stack), open to the nodes' network only.
    start_daemon $((PORT + 1)) --host :: --allow fd31:231::/64
    has daemon.log "listening on [::]:$((PORT + 1))"
    mc_on 1 "$MESHRUN" ping "$E:$((PORT + 1))" -c 1 > "$W/ping.out" 2>&1 || mc_fail "ping over IPv6 failed"
    has ping.out "seq=1 $E:$((PORT + 1)): meshrun-rendezvous"
    mc_on 1 "$MESHRUN" check --rdzv-endpoint "$E:$((PORT + 1))" > "$W/check.out" 2>&1
    has check.out "PASS host.route: reaches $(mc_ip 0) from $(mc_ip 1) on eth0"
    has check.out "PASS endpoint.daemon: $E:$((PORT + 1)) is meshrun-rendezvous"
    has check.out "it sees this host as [$(mc_ip 1)]:"
    # node0 itself over ::1 is outside the rule: rejected, and told so.
    mc_on 0 "$MESHRUN" ping "[::1]:$((PORT + 1))" -c 1 > "$W/rejected.out" 2>&1 && mc_fail "a peer outside --allow was served"
    has rejected.out "[rejected]"
    # 2. A job: node0's agent hosts the rendezvous for the IPv6 endpoint (on [::], as no IPv4 reaches it).
    job v6 "$E:$PORT" --allreduce
    has v6.node0.log "hosting the rendezvous on [::]:$PORT"
    for r in 0 1; do
      rec v6 $r "MASTER_ADDR=$(mc_ip 0)"   # PyTorch takes a bare IPv6 MASTER_ADDR, no brackets
      rec v6 $r "GLOO_SOCKET_IFNAME=eth0"
      rec v6 $r "SUM=3"
    done
    ;;
  nodns)
    echo "127.0.0.1 localhost" > "$MC_HOSTS"   # the nodes' names are in no hosts file, and no DNS server is reachable
    mc_on 1 getent hosts node0 > /dev/null && mc_fail "node0 resolves on node1: this scenario would test nothing"
    mc_on 1 getent hosts node1 > /dev/null && mc_fail "node1 resolves its own name: this scenario would test nothing"
    start_daemon "$PORT" --host 0.0.0.0
    job_start nodns "$(mc_ip 0):$PORT" --allreduce --hold
    for r in 0 1; do mc_wait_for "$W/nodns/r$r" "RANK=" 30 > /dev/null; done
    # While the workers hold: the daemon knows each node by its address on the route to it, never by a
    # name nobody can resolve.
    mc_on 1 "$DAEMON" status --endpoint "$(mc_ip 0):$PORT" --json > "$W/status.json" 2>&1 || mc_fail "status failed"
    addrs=$("$PY" -c 'import json, sys; print(" ".join(sorted(n["addr"] for r in json.load(open(sys.argv[1]))["runs"] for n in r["nodes"])))' \
      "$W/status.json" 2>&1)
    [ "$addrs" = "$(mc_ip 0) $(mc_ip 1)" ] || mc_fail "the daemon knows the nodes as '$addrs', expected '$(mc_ip 0) $(mc_ip 1)'"
    touch "$W/nodns/release"
    job_wait nodns
    for r in 0 1; do
      rec nodns $r "MASTER_ADDR=$(mc_ip 0)"
      rec nodns $r "GLOO_SOCKET_IFNAME=eth0"   # Gloo would otherwise look its host name up, fail, and bind loopback
      rec nodns $r "SUM=3"
    done
    ;;
  twonets)
    mc_add_net eth1 10.232.0
    # The names lead to the second network, which carries no TCP: a worker that picks its interface from its
    # host name (Gloo's default) would wait there until its timeout.
    { echo "127.0.0.1 localhost"; echo "10.232.0.1 node0"; echo "10.232.0.2 node1"; } > "$MC_HOSTS"
    for i in 0 1; do nsenter --net="/run/netns/$(mc_ns "$i")" iptables -A INPUT -i eth1 -p tcp -j DROP; done
    [ "$(mc_on 1 getent hosts node0 | awk '{print $1}')" = 10.232.0.1 ] || mc_fail "node0 does not resolve to eth1's network"
    job pick "$(mc_ip 0):$PORT" --allreduce
    for r in 0 1; do
      rec pick $r "GLOO_SOCKET_IFNAME=eth0"
      rec pick $r "NCCL_SOCKET_IFNAME==eth0"
      rec pick $r "SUM=3"
    done
    # The user's own choice is kept (recorded only: these would not carry an all-reduce between the nodes).
    JOB_ENV=(GLOO_SOCKET_IFNAME=lo NCCL_SOCKET_IFNAME=^docker,lo)
    job kept "$(mc_ip 0):$((PORT + 1))"
    JOB_ENV=()
    for r in 0 1; do
      rec kept $r "GLOO_SOCKET_IFNAME=lo"
      rec kept $r "NCCL_SOCKET_IFNAME=^docker,lo"
    done
    # --local-addr names this node's address on the second network: its interface is the workers'.
    LOCAL_NET=10.232.0 job local "$(mc_ip 0):$((PORT + 2))"
    for r in 0 1; do rec local $r "GLOO_SOCKET_IFNAME=eth1"; done
    ;;
  *) echo "unknown scenario $SCENARIO"; exit 2 ;;
esac
echo "TIME $SCENARIO: $(mc_elapsed "$t0") s"

echo "$MC_FAILS failure(s)"
[ "$MC_FAILS" = 0 ]
