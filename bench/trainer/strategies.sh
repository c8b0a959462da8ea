#!/usr/bin/env bash
# The FSDP-guide style table, meshrun-trainer beside PyTorch with the matching settings in the same run:
# small config (25.4M params), CPU, Gloo, fp32, OMP_NUM_THREADS=1. Each strategy against its FSDP2
# equivalent (bench/trainer/train_fsdp2_reference.py):
#   NO_SHARD -> DistributedDataParallel        SHARD_GRAD_OP -> fully_shard(reshard_after_forward=False)
#   FULL_SHARD -> fully_shard(reshard_after_forward=True)
#   HYBRID_SHARD / _ZERO2 -> fully_shard over a (replicate, shard) DeviceMesh, resharding / not
# Activation checkpointing wraps the same blocks on both sides. Per row: iterations per second (median step
# time, first 3 steps skipped; both sides time batch building through the loss all-reduce), peak RSS per
# rank (max over ranks), and the peak above the rank's own baseline (RSS just before the model is built),
# each with the ratio meshrun / FSDP2. Not part of ctest.
#   bench/trainer/strategies.sh [STEPS]     (default 12)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/trainer_env.sh"
STEPS="${1:-12}"

printf '# small config, CPU, Gloo, fp32, global batch 8 x 256 tokens, OMP_NUM_THREADS=1, %s steps (3 untimed)\n' "$STEPS"
"$PY" "$ROOT/bench/trainer/trainer_compare.py" header strategies
run() {  # label ranks sets...
  local label="$1" ranks="$2"; shift 2
  local out="$WORK/$RANDOM"
  run_pair "$out" "$ranks" "$ROOT/configs/small.json" "$STEPS" "$@"
  "$PY" "$ROOT/bench/trainer/trainer_compare.py" strategies "$out" "$ranks" 3 "$label"
}
run "NO_SHARD (DDP)" 2 fsdp.strategy=NO_SHARD
run "SHARD_GRAD_OP (ZeRO-2)" 2 fsdp.strategy=SHARD_GRAD_OP
run "FULL_SHARD (ZeRO-3)" 2 fsdp.strategy=FULL_SHARD
run "FULL_SHARD + activation ckpt" 2 fsdp.strategy=FULL_SHARD fsdp.activation_checkpointing=1
run "HYBRID_SHARD 2 replicas x 1 shard" 2 fsdp.strategy=HYBRID_SHARD fsdp.shard_group_size=1
run "HYBRID_SHARD 2 replicas x 2 shards" 4 fsdp.strategy=HYBRID_SHARD fsdp.shard_group_size=2
run "HYBRID_SHARD_ZERO2 2 x 2 shards" 4 fsdp.strategy=HYBRID_SHARD_ZERO2 fsdp.shard_group_size=2
