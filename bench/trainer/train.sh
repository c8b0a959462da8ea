#!/usr/bin/env bash
# meshrun-trainer vs PyTorch FSDP2 (fully_shard, torchrun, Gloo) on CPU, world size 2, tiny and small
# configs, like with like: same model shape and init, the same batches of the same data, batch size,
# sequence length, dtype (fp32), AdamW (fused; weight decay on matrices only), learning rate, clipping and
# OMP_NUM_THREADS. Both time the same window per step: building the batch, forward, backward, gradient
# reduction, clip, AdamW, the loss all-reduce. Prints, per config, median tokens/s (first 5 steps not
# timed) and per-rank memory two ways: the peak RSS (max over ranks) and the peak above the rank's own
# baseline, its RSS just before the model is built (the reference's baseline holds Python and the CUDA
# libraries `import torch` maps; ours holds LibTorch). Ratios are meshrun / FSDP2. Not part of ctest.
#   bench/trainer/train.sh [STEPS]        (default 30 steps per run)
#   CONFIGS="small" TRAINER=/path/to/meshrun-trainer bench/trainer/train.sh 20   (one config; another trainer binary)
#   REPEATS=3 CONFIGS="small" bench/trainer/train.sh   (three pairs per config and their median ratio: on a shared
#                                               machine one pair's ratio moves by +-5 % from run to run)
set -euo pipefail
THREADS="${OMP_NUM_THREADS:-1}"  # the caller's choice, applied to both sides
source "$(dirname "${BASH_SOURCE[0]}")/trainer_env.sh"
STEPS="${1:-30}"
export OMP_NUM_THREADS="$THREADS"

printf '# CPU, Gloo, fp32, world 2, OMP_NUM_THREADS=%s, %s steps (5 untimed); memory per rank, max over ranks\n' \
  "$THREADS" "$STEPS"
REPEATS="${REPEATS:-1}"
for cfg in ${CONFIGS:-tiny small}; do
  ratios=()
  for ((rep = 1; rep <= REPEATS; rep++)); do
    run_pair "$WORK/$cfg.$rep" 2 "$ROOT/configs/$cfg.json" "$STEPS" system.threads="$THREADS"
    row="$("$PY" "$ROOT/bench/trainer/trainer_compare.py" train "$WORK/$cfg.$rep" 2 5 "$cfg")"
    echo "$row"
    ratios+=("$(sed -n 's/.*throughput x\([0-9.]*\),.*/\1/p' <<< "$row")")
  done
  if ((REPEATS > 1)); then
    printf '%s: throughput ratios %s, median x%s\n' "$cfg" "${ratios[*]}" \
      "$(printf '%s\n' "${ratios[@]}" | sort -n | sed -n "$(((REPEATS + 1) / 2))p")"
  fi
done
