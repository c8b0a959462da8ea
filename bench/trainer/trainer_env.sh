# shellcheck shell=bash
# Sourced by the trainer benchmarks: paths of the built programs and the pinned Python, a scratch folder
# removed on exit, and one intra-op thread per rank on both sides of every comparison.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="$ROOT/.venv/bin/python"
TRAINER="${TRAINER:-$ROOT/build/bin/meshrun-trainer}"
LAUNCHER="$ROOT/build/bin/meshrun"
[ -x "$TRAINER" ] && [ -x "$LAUNCHER" ] || { echo "build first: cmake --build build --target meshrun-trainer meshrun" >&2; exit 2; }
export OMP_NUM_THREADS=1
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# run_pair OUT RANKS CONFIG STEPS [KEY=VALUE ...]
# One comparison: meshrun-trainer under meshrun (output.dir OUT, log OUT.log), then the PyTorch reference
# (bench/trainer/train_fsdp2_reference.py) under torchrun with the same config, the same KEY=VALUE overrides
# (fsdp.strategy picks the FSDP2 equivalent) and the same step count (log OUT.ref.log). Read the pair with
# bench/trainer/trainer_compare.py. A failed run keeps its log (its path is printed with its tail) and stops the script.
# REF_ARGS adds flags to the reference alone, e.g. REF_ARGS="--adamw for-loop" (PyTorch's CPU default).
run_pair() {
  local out="$1" ranks="$2" config="$3" steps="$4"
  shift 4
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  "$LAUNCHER" --standalone --nproc-per-node "$ranks" "$TRAINER" --config "$config" \
    --set train.steps="$steps" --set train.sample_tokens=0 --set train.eval_interval=0 \
    --set train.log_interval=1000 --set output.progress_bar=false --set output.dir="\"$out\"" \
    ${sets[@]+"${sets[@]}"} > "$out.log" 2>&1 || failed "$out.log"
  # shellcheck disable=SC2086  # REF_ARGS is a list of flags: split on purpose
  "$PY" -m torch.distributed.run --standalone --nproc-per-node "$ranks" "$ROOT/bench/trainer/train_fsdp2_reference.py" \
    --config "$config" --steps "$steps" ${sets[@]+"${sets[@]}"} ${REF_ARGS:-} > "$out.ref.log" 2>&1 \
    || failed "$out.ref.log"
}
failed() {  # LOG: keep it past the scratch folder's removal, show its tail, stop
  local kept
  kept="$(mktemp --suffix=.log "${TMPDIR:-/tmp}/meshrun-bench-failed.XXXXXX")"
  cp "$1" "$kept"
  grep -v '^[[:space:]]*$' "$kept" | tail -40 >&2
  echo "run failed; full log: $kept" >&2
  exit 1
}
