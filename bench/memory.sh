#!/usr/bin/env bash
# Peak resident memory per rank by sharding strategy, for a model whose parameters, gradients and AdamW
# state dominate the process: the 150m config (152M parameters; fp32 master weights, fp32 compute here),
# 2 CPU ranks, Gloo, through meshrun, a small batch (1 x 128 tokens per rank) so activations stay small.
# Per strategy: the peak RSS of each rank's process (getrusage; max over ranks), its RSS right after
# start-up (LibTorch + process group, before the model exists), the model state the rank accounts for
# (parameter shard + gathered peak + gradients + AdamW state, from rank<R>.json), and s/step. Not in ctest.
#   bench/memory.sh [STEPS]     (default 2)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/trainer_env.sh"
STEPS="${1:-2}"

printf '# 150m config (152M params), CPU, Gloo, fp32, 2 ranks, 1 x 128 tokens per rank, OMP_NUM_THREADS=1, %s steps\n' "$STEPS"
printf '| %-24s | %5s | %17s | %15s | %13s | %16s | %6s |\n' strategy ranks "peak RSS MB/rank" "start RSS MB" "state MB/rank" "peak - start MB" "s/step"
printf '| %-24s | %5s | %17s | %15s | %13s | %16s | %6s |\n' "---" "---" "---" "---" "---" "---" "---"
run() {  # label ranks sets...
  local label="$1" ranks="$2"; shift 2
  local out="$WORK/$RANDOM"
  local args=()
  for s in "$@"; do args+=(--set "$s"); done
  "$LAUNCHER" --standalone --nproc-per-node "$ranks" "$TRAINER" --config "$ROOT/configs/150m.json" \
    --set data.format=text --set data.path=/usr/share/games/fortunes --set 'data.exclude=["*.dat","*.u8"]' \
    --set fsdp.param_dtype=fp32 --set train.global_batch_size="$ranks" --set train.seq_len=128 \
    --set train.steps="$STEPS" --set train.warmup_steps=1 --set train.sample_tokens=0 --set train.log_interval=1000 \
    --set output.dir="\"$out\"" "${args[@]}" > "$out.log" 2>&1 || { cat "$out.log" >&2; exit 1; }
  "$PY" - "$out" "$ranks" "$label" <<'PY'
import json, statistics, sys
out, ranks, label = sys.argv[1], int(sys.argv[2]), sys.argv[3]
steps = [json.loads(l) for l in open(out + "/metrics.jsonl") if '"step_time_s"' in l]
reps = [json.load(open(f"{out}/rank{r}.json")) for r in range(ranks)]
mb = lambda b: b / 2**20
peak = max(r["peak_rss_bytes"] for r in reps)
start = max(r["start_rss_bytes"] for r in reps)
state = max(r["param_shard_bytes"] + r["gathered_param_peak_bytes"] + r["grad_shard_bytes"] + r["optimizer_bytes"]
            for r in reps)
grow = max(r["peak_rss_bytes"] - r["start_rss_bytes"] for r in reps)
sps = statistics.median(s["step_time_s"] for s in steps[1:] or steps)
print(f"| {label:<24} | {ranks:5d} | {mb(peak):17.0f} | {mb(start):15.0f} | {mb(state):13.0f} | {mb(grow):16.0f} | {sps:6.2f} |")
PY
}
run "NO_SHARD (DDP)" 2 fsdp.strategy=NO_SHARD
run "SHARD_GRAD_OP (ZeRO-2)" 2 fsdp.strategy=SHARD_GRAD_OP
run "FULL_SHARD (ZeRO-3)" 2 fsdp.strategy=FULL_SHARD
