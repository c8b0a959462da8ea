#!/usr/bin/env bash
# Peak resident memory per rank by sharding strategy, meshrun-trainer beside PyTorch with the matching
# settings in the same run (NO_SHARD -> DistributedDataParallel, SHARD_GRAD_OP ->
# fully_shard(reshard_after_forward=False), FULL_SHARD -> fully_shard(reshard_after_forward=True); FSDP2
# builds on the meta device and materializes only its shards), for a model whose parameters, gradients
# and AdamW state dominate the process: the 150m config (152M parameters; fp32 master weights, fp32
# compute here), 2 CPU ranks, Gloo, a small batch (1 x 128 tokens per rank) so activations stay small.
# Per strategy and side: the peak RSS of each rank's process (getrusage; max over ranks), its baseline
# (RSS just before the model is built, data opened: the runtime, its libraries and the process group),
# the peak above that baseline (max over ranks), the ratios meshrun / FSDP2, and s/step (first step
# skipped). Not part of ctest.
#   bench/trainer/memory.sh [STEPS]     (default 3)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/trainer_env.sh"
STEPS="${1:-3}"

printf '# 150m config (152M params), CPU, Gloo, fp32, 2 ranks, 1 x 128 tokens per rank, OMP_NUM_THREADS=1, %s steps\n' "$STEPS"
"$PY" "$ROOT/bench/trainer/trainer_compare.py" header memory
run() {  # label ranks sets...
  local label="$1" ranks="$2"; shift 2
  local out="$WORK/$RANDOM"
  run_pair "$out" "$ranks" "$ROOT/configs/150m.json" "$STEPS" data.format=text data.path=/usr/share/games/fortunes \
    'data.exclude=["*.dat","*.u8"]' fsdp.param_dtype=fp32 train.global_batch_size="$ranks" train.seq_len=128 \
    train.warmup_steps=1 "$@"
  "$PY" "$ROOT/bench/trainer/trainer_compare.py" memory "$out" "$ranks" 1 "$label"
}
run "NO_SHARD (DDP)" 2 fsdp.strategy=NO_SHARD
run "SHARD_GRAD_OP (ZeRO-2)" 2 fsdp.strategy=SHARD_GRAD_OP
run "FULL_SHARD (ZeRO-3)" 2 fsdp.strategy=FULL_SHARD
