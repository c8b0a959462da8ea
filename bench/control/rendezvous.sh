#!/usr/bin/env bash
# Rendezvous at scale: N simulated agents join one run on a fresh daemon; prints the time until every
# agent holds its rank, the daemon's peak RSS and its CPU time.
#   bench/control/rendezvous.sh [N...]                        (default 64 256 1024; 4096 and 10000 work too)
#   BIN=build-launcher/bin bench/control/rendezvous.sh 10000  (programs from another build folder; default build/bin)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${BIN:-$ROOT/build/bin}"
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(64 256 1024)
for p in rdzv_bench meshrun-rendezvous; do
  [ -x "$BIN/$p" ] || { echo "no $BIN/$p: build it (cmake --build build --target $p) or set BIN" >&2; exit 2; }
done
# One connection per agent on each side: the soft fd limit up to the hard one (never down: a plain
# `ulimit -n N` would lower the hard limit too).
ulimit -Sn "$(ulimit -Hn)"
pid=""
trap '[ -z "$pid" ] || kill "$pid" 2>/dev/null || true' EXIT
echo "# rendezvous: agents joined -> all ranks assigned (one run, N nodes x 8 workers)"
echo "# $(nproc) cores shared by the daemon and rdzv_bench (one thread per agent); load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# daemon_cpu_s: the daemon's CPU (user+sys) over the whole bench run, connecting included"
printf '# %7s %12s %14s %13s %s\n' agents seconds daemon_rss_MB daemon_cpu_s ranks
for n in "${sizes[@]}"; do
  out=$(mktemp)
  "$BIN/meshrun-rendezvous" --host 127.0.0.1 --port 0 --log-level warn >"$out" &
  pid=$!
  for _ in $(seq 50); do [ -s "$out" ] && break; sleep 0.1; done
  port=$(head -1 "$out" | sed 's/.*://')
  read -r agents secs status < <("$BIN/rdzv_bench" "127.0.0.1:$port" "$n")
  rss=$(awk '/VmHWM/ {print $2/1024}' "/proc/$pid/status")
  cpu=$(awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$pid/stat")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  pid=""
  printf '  %7d %12.4f %14.1f %13.2f %s\n' "$agents" "$secs" "$rss" "$cpu" "$status"
  rm -f "$out"
done
