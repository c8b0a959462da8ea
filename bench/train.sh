#!/usr/bin/env bash
# meshrun-trainer vs PyTorch FSDP2 (fully_shard, torchrun, Gloo) on CPU, world size 2, tiny and small
# configs: same model shape, batch, sequence length, dtype (fp32) and OMP_NUM_THREADS. Prints median
# tokens/s and peak RSS per rank for both, and the ratios. Not part of ctest.
#   bench/train.sh [STEPS]        (default 30 steps per run; the first 5 are not timed)
#   CONFIGS="small" TRAINER=/path/to/meshrun-trainer bench/train.sh 20   (one config; another trainer binary)
set -euo pipefail
THREADS="${OMP_NUM_THREADS:-1}"  # the caller's choice, applied to both sides
source "$(dirname "${BASH_SOURCE[0]}")/trainer_env.sh"
STEPS="${1:-30}"
export OMP_NUM_THREADS="$THREADS"

for cfg in ${CONFIGS:-tiny small}; do
  out="$WORK/$cfg"
  "$LAUNCHER" --standalone --nproc-per-node 2 "$TRAINER" --config "$ROOT/configs/$cfg.json" \
    --set train.steps="$STEPS" --set train.sample_tokens=0 --set train.eval_interval=0 \
    --set system.threads="$THREADS" --set output.dir="\"$out\"" > "$WORK/$cfg.ours.log" 2>&1
  "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 "$ROOT/bench/train_fsdp2_reference.py" \
    --config "$ROOT/configs/$cfg.json" --steps "$STEPS" > "$WORK/$cfg.torch.log" 2>&1
  "$PY" - "$out" "$WORK/$cfg.torch.log" "$cfg" "$THREADS" <<'PY'
import json, statistics, sys
out, torch_log, cfg, threads = sys.argv[1:]
steps = [json.loads(l) for l in open(out + "/metrics.jsonl") if '"tokens_per_s"' in l]
ours_tps = statistics.median(s["tokens_per_s"] for s in steps[5:] or steps)
ours_rss = max(json.load(open(f"{out}/rank{r}.json"))["peak_rss_bytes"] for r in (0, 1))
# Ranks print at the same moment: a line may hold two objects, so decode every object in it.
ref, dec = [], json.JSONDecoder()
for l in open(torch_log):
    i = l.find('{"rank"')
    while i >= 0:
        obj, end = dec.raw_decode(l, i)
        ref.append(obj)
        i = l.find('{"rank"', end)
ref_tps = statistics.median(r["tokens_per_s"] for r in ref)
ref_rss = max(r["peak_rss_bytes"] for r in ref)
mib = lambda b: b / 2**20
print(f"{cfg:6s} world 2, OMP_NUM_THREADS={threads}: meshrun {ours_tps:9.0f} tok/s, peak RSS {mib(ours_rss):7.1f} MiB | "
      f"FSDP2 {ref_tps:9.0f} tok/s, peak RSS {mib(ref_rss):7.1f} MiB | throughput x{ours_tps / ref_tps:.2f}, "
      f"memory x{ours_rss / ref_rss:.2f}")
PY
done
