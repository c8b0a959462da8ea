#!/usr/bin/env bash
# Store throughput: meshrun-rendezvous vs PyTorch's own TCPStore server (libuv backend, pinned torch),
# both on 127.0.0.1, measured by the same client program (bench/control/store/store_bench.cpp).
#   bench/control/store.sh [SECONDS_PER_OP]             (default 2)
#   BIN=build-launcher/bin bench/control/store.sh     (programs from another build folder; default build/bin)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${BIN:-$ROOT/build/bin}"
PY="$ROOT/.venv/bin/python"
SECS="${1:-2}"
[ -x "$BIN/store_bench" ] || { echo "build first: scripts/setup.sh" >&2; exit 2; }

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
out=$(mktemp)
"$BIN/meshrun-rendezvous" --host 127.0.0.1 --port 0 --log-level warn >"$out" &
pids+=($!)
for _ in $(seq 50); do [ -s "$out" ] && break; sleep 0.1; done
ours=$(head -1 "$out" | sed 's/.*://')
theirs=$("$PY" - <<'PYEOF'
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()
PYEOF
)
"$PY" -c "
import time, torch.distributed as d
s = d.TCPStore('127.0.0.1', $theirs, is_master=True, wait_for_workers=False, use_libuv=True)
time.sleep(100000)" &
pids+=($!)
sleep 3

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
tick_us=$(echo "1000000 / $(getconf CLK_TCK)" | bc -l)
ours_pid=${pids[0]}; theirs_pid=${pids[1]}

echo "# store ops: meshrun-rendezvous (port $ours) vs torch $("$PY" -c 'import torch;print(torch.__version__)') TCPStore libuv server (port $theirs), ${SECS}s per op"
echo "# clients are threads of one process on the same 2-core machine, so throughput is often client-bound;"
echo "# server_us/op is the server's own CPU time per operation (utime+stime), the server-side cost."
printf '# %-4s %7s %12s %12s %7s %9s %9s %9s %9s\n' op clients ours_ops/s torch_ops/s ratio ours_p50 torch_p50 ours_p99 torch_p99
for clients in 1 16 64; do
  c0=$(cpu_ticks "$ours_pid"); a=$("$BIN/store_bench" "127.0.0.1:$ours" "$clients" "$SECS"); c1=$(cpu_ticks "$ours_pid")
  t0=$(cpu_ticks "$theirs_pid"); b=$("$BIN/store_bench" "127.0.0.1:$theirs" "$clients" "$SECS"); t1=$(cpu_ticks "$theirs_pid")
  paste <(echo "$a") <(echo "$b") | while read -r op ops p50 p99 _ ops2 p502 p992; do
    printf '  %-4s %7d %12.0f %12.0f %6.2fx %8.1fus %8.1fus %8.1fus %8.1fus\n' "$op" "$clients" "$ops" "$ops2" \
      "$(echo "$ops / $ops2" | bc -l)" "$p50" "$p502" "$p99" "$p992"
  done
  total_a=$(echo "$a" | awk -v s="$SECS" '{t += $2 * s} END {print t}')
  total_b=$(echo "$b" | awk -v s="$SECS" '{t += $2 * s} END {print t}')
  ua=$(echo "($c1 - $c0) * $tick_us / $total_a" | bc -l); ub=$(echo "($t1 - $t0) * $tick_us / $total_b" | bc -l)
  printf '  %-4s %7d server CPU per op: ours %.2fus, torch %.2fus, torch/ours %.2fx\n' all "$clients" "$ua" "$ub" \
    "$(echo "$ub / $ua" | bc -l)"
done
