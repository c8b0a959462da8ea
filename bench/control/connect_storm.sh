#!/usr/bin/env bash
# Connect storm: N simulated ranks start at once, do what a PyTorch rank does on connecting to its store
# (VALIDATE + PING), SET a key each and meet at torch.distributed.elastic's store barrier (ADD on a counter,
# the last one in sets the release key, everyone WAITs on it). Against meshrun-rendezvous and PyTorch's own
# TCPStore server (libuv backend, pinned torch) in the same run, each fresh for every N, driven by the same
# client (bench/control/storm/connect_storm.cpp: one epoll process, sockets spread over 127.77.x.y source addresses).
# Prints the time until every rank is released, connection failures, the server's CPU time and peak RSS
# (VmHWM; growth = peak - RSS before the storm, so the Python interpreter under torch's server is not
# counted), the kernel's accept-queue overflows, and ratios (meshrun / libuv: < 1 is better). Not in ctest.
#   bench/control/connect_storm.sh [N...]                       (default 4096 16384 65536)
#   BIN=build-launcher/bin bench/control/connect_storm.sh 4096  (programs from another build folder; default build/bin)
#   TIMEOUT_S=600 bench/control/connect_storm.sh 65536          (give up on a storm after this long; default 300)
# Each process holds one descriptor per rank: an N that the hard fd limit (ulimit -Hn) cannot hold is
# reported and skipped.
# NOTE: torch's libuv server turns every accepted peer address into a host name (getnameinfo) on its event
# loop thread, which asks DNS for 127.77.x.y; one lost query stalls every client for the resolver's 5 s
# timeout. So that the figure is the server's and not the resolver's, the libuv server runs in a private
# mount namespace whose /etc/hosts names the source addresses (needs root; REVERSE_DNS=resolver, or no
# root, leaves the lookups to the system's resolver, and the header says so).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${BIN:-$ROOT/build/bin}"
PY="$ROOT/.venv/bin/python"
TIMEOUT_S="${TIMEOUT_S:-300}"
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(4096 16384 65536)
for p in connect_storm meshrun-rendezvous; do
  [ -x "$BIN/$p" ] || { echo "no $BIN/$p: build it (cmake --build build --target $p) or set BIN" >&2; exit 2; }
done
[ -x "$PY" ] || { echo "no $PY: run scripts/setup.sh" >&2; exit 2; }

# The servers and the client inherit this: as many descriptors as the hard limit allows.
ulimit -Sn "$(ulimit -Hn)"
fd_limit=$(ulimit -Hn)

work=$(mktemp -d)
server_pid=""
stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}
trap 'stop_server; rm -rf "$work"' EXIT

# Starts a server in the background: sets server_pid and server_port.
start_ours() {
  "$BIN/meshrun-rendezvous" --host 127.0.0.1 --port 0 --log-level warn >"$work/server.out" 2>"$work/server.err" &
  server_pid=$!
  wait_for_port 's/^listening on .*://p'
}
# The source addresses connect_storm uses (127.77.0.1, 127.77.0.2, ...: 256 of them cover 1M ranks), also
# in their IPv4-mapped form: the libuv server listens on "::" and looks its peers up as IPv6 addresses.
hosts_file() {
  cat /etc/hosts
  local s a
  for s in $(seq 0 255); do
    a="127.77.$((s / 250)).$((s % 250 + 1))"
    printf '%s storm-%d\n::ffff:%s storm-%d\n' "$a" "$s" "$a" "$s"
  done
}
libuv_wrap=()
if [ "${REVERSE_DNS:-hosts}" != resolver ] && [ "$(id -u)" = 0 ] &&
  unshare -m sh -c 'mount --bind /dev/null /etc/hosts' 2>/dev/null; then
  hosts_file >"$work/hosts"
  libuv_wrap=(unshare -m sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$work/hosts")
  lookups="answered from a private /etc/hosts"
else
  lookups="sent to the system resolver ($(awk '/^nameserver/ {print $2; exit}' /etc/resolv.conf))"
fi
start_libuv() {
  "${libuv_wrap[@]}" "$PY" -c "
import resource, time, torch.distributed as d
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
s = d.TCPStore('127.0.0.1', 0, is_master=True, wait_for_workers=False, use_libuv=True)
print('listening on', s.port, flush=True)
time.sleep(1e9)" >"$work/server.out" 2>"$work/server.err" &
  server_pid=$!
  wait_for_port 's/^listening on //p'
}
wait_for_port() {
  server_port=""
  for _ in $(seq 300); do
    server_port=$(sed -n "$1" "$work/server.out" | head -1)
    [ -n "$server_port" ] && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "server did not start:" >&2
  cat "$work/server.err" >&2
  exit 1
}

cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$1/stat"; }
status_mb() { awk -v k="$2:" '$1 == k {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }
# SYNs the kernel dropped because a listener's accept queue was full (the client retransmits after 1 s, 3 s...).
listen_overflows() {
  awk '/^TcpExt:/ { if (!seen) { for (i = 1; i <= NF; i++) col[$i] = i; seen = 1 } else print $col["ListenOverflows"] }' \
    /proc/net/netstat
}

# Runs one storm against the server just started; prints its row and sets the globals the ratio row reads.
measure() {  # name ranks
  local name="$1" n="$2" line rc=0
  local rss0 cpu0 ovf0
  rss0=$(status_mb "$server_pid" VmRSS); cpu0=$(cpu_s "$server_pid"); ovf0=$(listen_overflows)
  line=$("$BIN/connect_storm" "127.0.0.1:$server_port" "$n" 0 "$TIMEOUT_S" 2>"$work/client.err") || rc=$?
  [ -n "$line" ] || { cat "$work/client.err" >&2; exit 1; }
  local cpu1 ovf1 peak
  cpu1=$(cpu_s "$server_pid"); ovf1=$(listen_overflows); peak=$(status_mb "$server_pid" VmHWM)
  read -r _ connected released ok refused reset timeout other retries client_cpu <<<"$line"
  local srv_cpu growth
  srv_cpu=$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN {printf "%.2f", b - a}')
  growth=$(awk -v a="$rss0" -v b="$peak" 'BEGIN {printf "%.1f", b - a}')
  printf '  %6d %-8s %10s %10s %8s/%-6s %4d/%d/%d/%d %7d %9s %9s %9s %9s %9d\n' "$n" "$name" "$connected" "$released" \
    "$ok" "$n" "$refused" "$reset" "$timeout" "$other" "$retries" "$srv_cpu" "$client_cpu" "$peak" "$growth" \
    "$((ovf1 - ovf0))"
  [ "$rc" -eq 0 ] || sed 's/^/    client: /' "$work/client.err" >&2
  if [ "$name" = meshrun ] && [ -s "$work/server.err" ]; then
    echo "    daemon warnings: $(wc -l <"$work/server.err"), first: $(head -1 "$work/server.err")"
  fi
  # A storm that did not release every rank has no completion time to compare.
  [ "$ok" -eq "$n" ] || released=0
  eval "${name}_time=$released ${name}_cpu=$srv_cpu ${name}_growth=$growth"
}

torch_version=$("$PY" -c 'import torch; print(torch.__version__)')
echo "# connect storm: N ranks connect (VALIDATE + PING), SET a key, ADD a counter, WAIT on the release key"
echo "# meshrun-rendezvous ($BIN) vs torch $torch_version TCPStore libuv server; client: connect_storm, one epoll process"
echo "# $(nproc) cores shared by the client and the server; load average $(cut -d' ' -f1-3 /proc/loadavg);" \
  "somaxconn $(cat /proc/sys/net/core/somaxconn), tcp_max_syn_backlog $(cat /proc/sys/net/ipv4/tcp_max_syn_backlog)," \
  "fd hard limit $fd_limit"
echo "# the libuv server's reverse lookups of client addresses are $lookups"
echo "# released_s: start -> last rank released; failures: refused/reset/timeout/other (retries: reconnects);"
echo "# srv_cpu_s: server CPU (user+sys) during the storm; peak_MB: server VmHWM; growth_MB: peak - RSS before;"
echo "# overflows: SYNs dropped on a full accept queue (ListenOverflows, whole network namespace)"
printf '# %6s %-8s %10s %10s %15s %9s %7s %9s %9s %9s %9s %9s\n' ranks server connected_s released_s released \
  failures retries srv_cpu_s cli_cpu_s peak_MB growth_MB overflows
for n in "${sizes[@]}"; do
  if ((n + 64 > fd_limit)); then
    printf '  %6d skipped: each process needs %d descriptors, the hard fd limit here is %d (raising it' \
      "$n" "$((n + 64))" "$fd_limit"
    printf ' needs CAP_SYS_RESOURCE: ulimit -Hn, LimitNOFILE= in systemd, /etc/security/limits.conf)\n'
    continue
  fi
  start_ours; measure meshrun "$n"; stop_server
  start_libuv; measure libuv "$n"; stop_server
  awk -v t1="$meshrun_time" -v t2="$libuv_time" -v c1="$meshrun_cpu" -v c2="$libuv_cpu" -v g1="$meshrun_growth" \
    -v g2="$libuv_growth" -v n="$n" 'function r(a, b) { return b > 0 ? sprintf("%.2fx", a / b) : "n/a" }
    BEGIN { t = (t1 > 0 && t2 > 0) ? r(t1, t2) : "n/a (a server did not release every rank)"
            printf "  %6d ratio    meshrun/libuv: time %s, server CPU %s, RSS growth %s\n", n, t, r(c1, c2), r(g1, g2) }'
done
