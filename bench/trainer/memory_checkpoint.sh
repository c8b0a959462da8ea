#!/usr/bin/env bash
# Copies in memory (checkpoint.memory_interval; docs/checkpoints.md): what they cost per step, and what they save
# on a restart, against storage checkpoints in the same harness. meshrun-trainer under meshrun --standalone,
# NPROC (2) CPU ranks, Gloo, OMP_NUM_THREADS=1, the small config (25.4M params: 305 MB of state over the ranks),
# 1 x 128 tokens per rank and step.
#   cost      the training loop's seconds for STEPS steps (best of REPS runs) with no copies, a copy every 10
#             steps and every step, and per copy its size, the writer's seconds and the training thread's wait
#   recovery  rank 1 killed -9 right after step KILL_AT (MESHRUN_TRAINER_FAULT_KILL_AFTER_STEP), TRIALS times
#             each: restored from the agents' memory (copies every 10 steps) vs from a storage checkpoint
#             (checkpoint.async every 10 steps, checkpoint.resume=auto). From the run's goodput ledger (--log-dir): the restart's
#             seconds from the fault to the first step after it, the steps done again and their seconds; from
#             the trainer, the load's seconds.
# Not in ctest.
#   bench/trainer/memory_checkpoint.sh [STEPS] [REPS] [TRIALS]      (default 60 3 3); env NPROC, KILL_AT (35), CONFIG (small),
#   PARTS ("cost recovery")
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/trainer_env.sh"
STEPS="${1:-60}"
REPS="${2:-3}"
TRIALS="${3:-3}"
NPROC="${NPROC:-2}"
KILL_AT="${KILL_AT:-35}"
CONFIG="${CONFIG:-small}"

# run OUT [--env K=V] [KEY=VALUE...]: one job, --max-restarts 1, its goodput ledger under OUT/logs.
run() {
  local out="$1"; shift
  local envs=() sets=()
  while [ $# -gt 0 ]; do
    if [ "$1" = --env ]; then envs+=("$2"); shift 2; else sets+=(--set "$1"); shift; fi
  done
  rm -rf "$out"
  env ${envs[@]+"${envs[@]}"} "$LAUNCHER" --standalone --nproc-per-node "$NPROC" --max-restarts 1 --log-dir "$out/logs" \
    "$TRAINER" --config "$ROOT/configs/$CONFIG.json" \
    --set train.steps="$STEPS" --set train.seq_len=128 --set train.global_batch_size="$NPROC" --set train.warmup_steps=1 \
    --set train.sample_tokens=0 --set train.log_interval=1000 --set output.progress_bar=false \
    --set checkpoint.dir="\"$out/ck\"" --set checkpoint.save_final=false --set output.dir="\"$out\"" \
    ${sets[@]+"${sets[@]}"} > "$out.log" 2>&1 || { tail -30 "$out.log" >&2; exit 1; }
}

PARTS="${PARTS:-cost recovery}"
# Interleaved, so a slow spell of the machine touches every mode alike.
for rep in $(seq "$REPS"); do
  [[ " $PARTS " == *" cost "* ]] || break
  run "$WORK/cost-off-$rep"
  run "$WORK/cost-k10-$rep" checkpoint.memory_interval=10
  run "$WORK/cost-k1-$rep" checkpoint.memory_interval=1
done
for trial in $(seq "$TRIALS"); do
  [[ " $PARTS " == *" recovery "* ]] || break
  run "$WORK/rec-memory-$trial" --env MESHRUN_TRAINER_FAULT_KILL_AFTER_STEP="$KILL_AT:1" checkpoint.memory_interval=10
  run "$WORK/rec-storage-$trial" --env MESHRUN_TRAINER_FAULT_KILL_AFTER_STEP="$KILL_AT:1" checkpoint.interval=10 \
    checkpoint.async=true checkpoint.resume=auto
done

"$PY" - "$WORK" "$NPROC" "$STEPS" "$REPS" "$TRIALS" "$KILL_AT" "$CONFIG" <<'PY'
import glob, json, statistics, sys
work, nproc, steps, reps, trials, kill_at, config = sys.argv[1:]

def events(path, name):
    return [json.loads(l) for l in open(path) if f'"event":"{name}"' in l.replace(" ", "")]

def span(values):
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

def cost_table():
    def loop_s(mode):
        return min(e["seconds"] for p in glob.glob(f"{work}/cost-{mode}-*/metrics.jsonl") for e in events(p, "train_done"))
    print(f"# copies in memory: cost, {config}, {nproc} CPU ranks, Gloo, OMP_NUM_THREADS=1, {steps} steps of 1 x 128 "
          f"tokens per rank, loop: best of {reps}")
    print("| copies | loop s | vs none | per copy: MiB/rank | writer s (median) | training waited s (median) |")
    print("|---|---|---|---|---|---|")
    base = loop_s("off")
    for mode, label in (("off", "none"), ("k10", "every 10 steps"), ("k1", "every step")):
        loop = loop_s(mode)
        copies = [e for p in glob.glob(f"{work}/cost-{mode}-*/metrics.jsonl") for e in events(p, "memory_copy")]
        cells = "- | - | -"
        if copies:
            cells = (f"{statistics.median(e['bytes'] for e in copies) / 2**20:.1f} | "
                     f"{statistics.median(e['copy_s'] for e in copies):.4f} | "
                     f"{statistics.median(e['blocked_s'] for e in copies):.4f}")
        print(f"| {label} | {loop:.2f} | {(loop / base - 1) * 100:+.1f} % | {cells} |")
    print()

def recovery_table():
    print(f"# copies in memory: recovery, rank 1 killed -9 after step {kill_at}, a copy or a checkpoint every 10 "
          f"steps, {trials} trials each (median, min-max)")
    print("| restored from | fault -> first step s | load s | steps done again | their s |")
    print("|---|---|---|---|---|")
    for mode, label, event in (("memory", "the agents' memory", "checkpoint_restored"),
                               ("storage", "storage (checkpoint.async)", "checkpoint_loaded")):
        ledgers = [json.load(open(p)) for p in glob.glob(f"{work}/rec-{mode}-*/logs/*/goodput.json")]
        loads = [e["seconds"] for p in glob.glob(f"{work}/rec-{mode}-*/metrics.jsonl") for e in events(p, event)]
        print(f"| {label} | {span([g['restarts_s'] for g in ledgers])} | {span(loads) if loads else '-'} | "
              f"{span([g['recomputed_steps'] for g in ledgers])} | {span([g['work_lost_s'] for g in ledgers])} |")

if glob.glob(f"{work}/cost-*"):
    cost_table()
if glob.glob(f"{work}/rec-*"):
    recovery_table()
PY
