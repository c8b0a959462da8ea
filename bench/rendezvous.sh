#!/usr/bin/env bash
# Rendezvous at scale: N simulated agents join one run on a fresh daemon; prints the time until every
# agent holds its rank and the daemon's peak RSS.
#   bench/rendezvous.sh [N...]     (default 64 256 1024)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/build/bin"
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(64 256 1024)
ulimit -n 8192 2>/dev/null || true
echo "# rendezvous: agents joined -> all ranks assigned (one run, N nodes x 8 workers)"
printf '# %7s %12s %14s %s\n' agents seconds daemon_rss_MB ranks
for n in "${sizes[@]}"; do
  out=$(mktemp)
  "$BIN/meshrun-rendezvous" --host 127.0.0.1 --port 0 --log-level warn >"$out" &
  pid=$!
  for _ in $(seq 50); do [ -s "$out" ] && break; sleep 0.1; done
  port=$(head -1 "$out" | sed 's/.*://')
  read -r agents secs status < <("$BIN/rdzv_bench" "127.0.0.1:$port" "$n")
  rss=$(awk '/VmHWM/ {print $2/1024}' "/proc/$pid/status")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  printf '  %7d %12.4f %14.1f %s\n' "$agents" "$secs" "$rss" "$status"
  rm -f "$out"
done
