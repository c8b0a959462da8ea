#!/usr/bin/env bash
# Checkpoint save/load speed: meshrun-trainer (sharded and full formats) vs PyTorch DCP
# (torch.distributed.checkpoint with FSDP2 fully_shard, Gloo, torchrun) for the small config (25.4M params:
# fp32 parameters + AdamW moments, ~305 MB) on 1, 2 and 4 ranks, CPU. Median of REPS saves (every save
# fsyncs its files) and of REPS loads (just after the saves: the files are in the page cache for both).
# Ratios > 1 mean meshrun is faster. Not part of ctest.
#   bench/trainer/checkpoint.sh [REPS]      (default 3)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/trainer_env.sh"
REPS="${1:-3}"

printf '# checkpoint speed, small config (fp32 params + AdamW moments), CPU, OMP_NUM_THREADS=1, median of %s\n' "$REPS"
printf '# %-5s %-8s %9s %9s %9s %9s | %9s %9s | %10s %10s\n' world format "save s" "save GB/s" "load s" "load GB/s" \
  "DCP save" "DCP load" "save x DCP" "load x DCP"
for world in 1 2 4; do
  "$PY" -m torch.distributed.run --standalone --nproc-per-node "$world" "$ROOT/bench/trainer/checkpoint_dcp_reference.py" \
    --config "$ROOT/configs/small.json" --dir "$WORK" --reps "$REPS" > "$WORK/dcp.log" 2>&1 \
    || { cat "$WORK/dcp.log" >&2; exit 1; }
  for format in sharded full; do
    out="$WORK/run" ck="$WORK/ck"
    rm -rf "$out" "$ck"
    common=(--config "$ROOT/configs/small.json" --set train.steps="$REPS" --set train.seq_len=32 --set train.sample_tokens=0
            --set checkpoint.dir="\"$ck\"" --set checkpoint.format="$format" --set train.log_interval=1000)
    # REPS steps with a save after each, then REPS runs that only load the newest one.
    "$LAUNCHER" --standalone --nproc-per-node "$world" "$TRAINER" "${common[@]}" --set checkpoint.interval=1 \
      --set output.dir="\"$out\"" > "$WORK/save.log" 2>&1 || { cat "$WORK/save.log" >&2; exit 1; }
    cp "$out/metrics.jsonl" "$WORK/save.jsonl"
    : > "$WORK/load.jsonl"
    for _ in $(seq "$REPS"); do
      "$LAUNCHER" --standalone --nproc-per-node "$world" "$TRAINER" "${common[@]}" --set checkpoint.save_final=false \
        --resume "$(ls -d "$ck"/step_* | tail -1)" --set output.dir="\"$out\"" > "$WORK/load.log" 2>&1 \
        || { cat "$WORK/load.log" >&2; exit 1; }
      cat "$out/metrics.jsonl" >> "$WORK/load.jsonl"
    done
    "$PY" - "$WORK/save.jsonl" "$WORK/load.jsonl" "$WORK/dcp.log" "$world" "$format" <<'PY'
import json, statistics, sys
save_log, load_log, dcp_log, world, fmt = sys.argv[1:]
ev = lambda path, name: [json.loads(l) for l in open(path) if f'"checkpoint_{name}"' in l]
saves, loads = ev(save_log, "saved"), ev(load_log, "loaded")
save_s = statistics.median(e["seconds"] for e in saves)
load_s = statistics.median(e["seconds"] for e in loads)
nbytes = saves[0]["bytes"]
dcp = json.loads([l for l in open(dcp_log) if l.startswith("{")][-1])
gb = lambda b, s: b / s / 1e9
ours_save, ours_load = gb(nbytes, save_s), gb(nbytes, load_s)
dcp_save, dcp_load = gb(dcp["bytes"], dcp["save_s"]), gb(dcp["bytes"], dcp["load_s"])
print(f"  {world:<5} {fmt:<8} {save_s:9.3f} {ours_save:9.2f} {load_s:9.3f} {ours_load:9.2f} | "
      f"{dcp_save:6.2f}GB/s {dcp_load:6.2f}GB/s | {ours_save / dcp_save:9.2f}x {ours_load / dcp_load:9.2f}x"
      f"   ({nbytes / 1e6:.0f} MB vs DCP {dcp['bytes'] / 1e6:.0f} MB, DCP {dcp['save_s']:.3f} s / {dcp['load_s']:.3f} s)")
PY
  done
done
