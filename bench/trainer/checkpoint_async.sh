#!/usr/bin/env bash
# Background checkpoints (checkpoint.async) vs blocking ones, and PyTorch DCP's dcp.save vs dcp.async_save
# (FSDP2 fully_shard, Gloo, torchrun; bench/trainer/checkpoint_dcp_reference.py --train-steps) in the same run, for
# the small (25.4M params, 305 MB of state) and 150m (152M params, fp32 here, 1.8 GB of state) configs:
# NPROC (2) CPU ranks, OMP_NUM_THREADS=1, 1 x 128 tokens per rank and step, a save every EVERY of STEPS
# steps (no final save).
# Per save: the seconds training was blocked (median over the saves; a blocking save: all of it; ours in the
# background: start() + the next optimizer step's wait for the snapshot + any wait for the previous save;
# DCP async: get_state_dict + async_save's staging + waiting for the previous save). Per run: the training
# loop's seconds (steps, saves, and the wait for the last background save; the fastest of REPS runs, as other
# work on the machine only ever slows a run down) against the same loop without checkpoints. Every save
# fsyncs its files (ours always, DCP's FileSystemWriter by default). Not in ctest.
#   bench/trainer/checkpoint_async.sh [STEPS] [EVERY] [REPS]      (default 10 3 2: saves at 3, 6, 9)
#   env NPROC (ranks, default 2), CONFIGS (default "small 150m")
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/trainer_env.sh"
STEPS="${1:-10}"
EVERY="${2:-3}"
REPS="${3:-2}"
NPROC="${NPROC:-2}"

printf '# checkpoint blocking time, %s rank(s), CPU, Gloo, fp32, OMP_NUM_THREADS=1, %s steps of 1 x 128 tokens per rank, a save every %s, loop: best of %s\n' \
  "$NPROC" "$STEPS" "$EVERY" "$REPS"
printf '| %-6s | %-22s | %15s | %12s | %10s | %14s | %12s |\n' config run "blocked/save s" "vs blocking" "loop s" "vs no saves" \
  "saves cost s"
printf '| %-6s | %-22s | %15s | %12s | %10s | %14s | %12s |\n' --- --- --- --- --- --- ---
for config in ${CONFIGS:-small 150m}; do
  extra=()
  # 150m's own data is a token file; both models read the fortunes text here (the same for every run).
  [ "$config" = 150m ] && extra=(--set data.format=text --set data.path=/usr/share/games/fortunes
                                 --set 'data.exclude=["*.dat","*.u8"]' --set fsdp.param_dtype=fp32)
  for rep in $(seq "$REPS"); do for mode in none sync async; do
    out="$WORK/$config-$mode-$rep" ck="$WORK/ck"
    rm -rf "$out" "$ck"
    interval=$EVERY
    [ "$mode" = none ] && interval=0
    "$LAUNCHER" --standalone --nproc-per-node "$NPROC" "$TRAINER" --config "$ROOT/configs/$config.json" "${extra[@]}" \
      --set train.steps="$STEPS" --set train.seq_len=128 --set train.global_batch_size="$NPROC" --set train.warmup_steps=1 \
      --set train.sample_tokens=0 --set train.log_interval=1000 --set checkpoint.dir="\"$ck\"" \
      --set checkpoint.interval="$interval" --set checkpoint.save_final=false \
      --set checkpoint.async="$([ "$mode" = async ] && echo true || echo false)" \
      --set output.dir="\"$out\"" > "$out.log" 2>&1 || { cat "$out.log" >&2; exit 1; }
    rm -rf "$ck"
  done; done
  "$PY" -m torch.distributed.run --standalone --nproc-per-node "$NPROC" "$ROOT/bench/trainer/checkpoint_dcp_reference.py" \
    --config "$ROOT/configs/$config.json" --dir "$WORK" --train-steps "$STEPS" --every "$EVERY" --seq-len 128 \
    --global-batch-size "$NPROC" --loop-reps "$REPS" > "$WORK/$config-dcp.log" 2>&1 || { cat "$WORK/$config-dcp.log" >&2; exit 1; }
  "$PY" - "$WORK" "$config" <<'PY'
import glob, json, statistics, sys
work, config = sys.argv[1:]
def ours(mode):
    saves, loops = [], []
    for path in glob.glob(f"{work}/{config}-{mode}-*/metrics.jsonl"):
        events = [json.loads(l) for l in open(path) if '"event"' in l]
        saves += [e["blocked_s"] for e in events if e["event"] == "checkpoint_saved"]
        loops += [e["seconds"] for e in events if e["event"] == "train_done"]
    return (statistics.median(saves) if saves else 0.0), min(loops)
runs = [json.loads(l) for l in open(f"{work}/{config}-dcp.log") if l.startswith("{")]
dcp = {}
for mode in ("none", "sync", "async"):
    blocked = [b for r in runs if r["mode"] == mode for b in r["blocked_s"]]
    dcp[mode] = (statistics.median(blocked) if blocked else 0.0, min(r["loop_s"] for r in runs if r["mode"] == mode))
rows = [("meshrun blocking", ours("sync"), ours("sync"), ours("none")),
        ("meshrun async", ours("async"), ours("sync"), ours("none")),
        ("DCP save", dcp["sync"], dcp["sync"], dcp["none"]),
        ("DCP async_save", dcp["async"], dcp["sync"], dcp["none"])]
for name, (blocked, loop), (sync_blocked, _), (_, base) in rows:
    print(f"| {config:<6} | {name:<22} | {blocked:15.4f} | {blocked / sync_blocked * 100:11.1f}% | {loop:10.2f} | "
          f"{(loop / base - 1) * 100:+13.1f}% | {loop - base:12.2f} |")
waits = [json.loads(l).get("snapshot_wait_s", 0.0) for p in glob.glob(f"{work}/{config}-async-*/metrics.jsonl")
         for l in open(p) if '"checkpoint_saved"' in l]
print(f"| {config:<6} | {'snapshot wait (max)':<22} | {max(waits):15.4f} | {'':>12} | {'':>10} | {'':>14} | {'':>12} |")
print(f"| {config:<6} | {'DCP async / ours async':<22} | {dcp['async'][0] / ours('async')[0]:14.1f}x | "
      f"{'':>12} | {'':>10} | {'':>14} | {'':>12} |")
PY
done
