#!/usr/bin/env bash
# The FSDP-guide style table for meshrun-trainer: small config (25.4M params), CPU, Gloo, fp32,
# OMP_NUM_THREADS=1, through meshrun: memory per rank (peak RSS of the process, max over ranks), the bytes
# of model state a rank holds (parameter shard + gathered peak + gradients + AdamW state, from rank<R>.json),
# the activation bytes a forward leaves alive for backward, and iterations per second (median step time,
# first 3 steps skipped). Not part of ctest.
#   bench/strategies.sh [STEPS]     (default 15)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/trainer_env.sh"
STEPS="${1:-15}"

printf '# small config, CPU, Gloo, fp32, global batch 8 x 256 tokens, OMP_NUM_THREADS=1, %s steps\n' "$STEPS"
printf '| %-34s | %5s | %16s | %16s | %18s | %6s |\n' strategy ranks "peak RSS MB/rank" "state MB/rank" "activations MB/rank" "it/s"
printf '| %-34s | %5s | %16s | %16s | %18s | %6s |\n' "---" "---" "---" "---" "---" "---"
run() {  # label ranks sets...
  local label="$1" ranks="$2"; shift 2
  local out="$WORK/$RANDOM"
  local args=()
  for s in "$@"; do args+=(--set "$s"); done
  "$LAUNCHER" --standalone --nproc-per-node "$ranks" "$TRAINER" --config "$ROOT/configs/small.json" \
    --set train.steps="$STEPS" --set train.sample_tokens=0 --set train.log_interval=1000 \
    --set output.dir="\"$out\"" "${args[@]}" > "$out.log" 2>&1 || { cat "$out.log" >&2; exit 1; }
  "$PY" - "$out" "$ranks" "$label" <<'PY'
import json, statistics, sys
out, ranks, label = sys.argv[1], int(sys.argv[2]), sys.argv[3]
steps = [json.loads(l) for l in open(out + "/metrics.jsonl") if '"step_time_s"' in l]
its = 1 / statistics.median(s["step_time_s"] for s in steps[3:] or steps)
reps = [json.load(open(f"{out}/rank{r}.json")) for r in range(ranks)]
rss = max(r["peak_rss_bytes"] for r in reps) / 2**20
act = max(r["activation_peak_bytes"] for r in reps) / 2**20
state = max(r["param_shard_bytes"] + r["gathered_param_peak_bytes"] + r["grad_shard_bytes"] + r["optimizer_bytes"]
            for r in reps) / 2**20
print(f"| {label:<34} | {ranks:5d} | {rss:16.0f} | {state:16.0f} | {act:18.0f} | {its:6.3f} |")
PY
}
run "NO_SHARD (DDP)" 2 fsdp.strategy=NO_SHARD
run "SHARD_GRAD_OP (ZeRO-2)" 2 fsdp.strategy=SHARD_GRAD_OP
run "FULL_SHARD (ZeRO-3)" 2 fsdp.strategy=FULL_SHARD
run "FULL_SHARD + activation ckpt" 2 fsdp.strategy=FULL_SHARD fsdp.activation_checkpointing=1
run "HYBRID_SHARD 2 replicas x 1 shard" 2 fsdp.strategy=HYBRID_SHARD fsdp.shard_group_size=1
run "HYBRID_SHARD 2 replicas x 2 shards" 4 fsdp.strategy=HYBRID_SHARD fsdp.shard_group_size=2
