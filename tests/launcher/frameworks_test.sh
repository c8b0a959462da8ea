#!/bin/bash
# Frameworks built on torchrun, unchanged, under meshrun (--standalone, 2 CPU workers): PyTorch Lightning
# (DDP, and sharded: ModelParallelStrategy with fully_shard), Hugging Face Accelerate and the transformers
# Trainer. Each must take meshrun's torchrun environment
# as its own: both ranks report the job's 2 processes and their rank from the framework's own API, run in
# the process meshrun spawned (no processes of the framework's own), finish their steps and end with the
# same weights. Usage: frameworks_test.sh FRAMEWORK MESHRUN VENV_BIN
FRAMEWORK=$1 MESHRUN=$2 VENV_BIN=$3
HERE=$(cd "$(dirname "$0")/frameworks" && pwd)
OUT=$(mktemp -d); trap 'rm -rf "$OUT"' EXIT
case $FRAMEWORK in
  lightning) JOB=lightning_job.py; EXPECT='r["environment"] == "TorchElasticEnvironment" and r["steps"] == 6' ;;
  lightning_sharded)  # FSDP2 under Lightning's ModelParallelStrategy: each rank holds 8 of the 16 rows
    JOB=lightning_sharded_job.py
    EXPECT='r["environment"] == "TorchElasticEnvironment" and r["steps"] == 6 and r["local_rows"] == 8' ;;
  accelerate) JOB=accelerate_job.py; EXPECT='r["distributed_type"].endswith("MULTI_CPU") and r["steps"] == 8' ;;
  hf_trainer) JOB=hf_trainer_job.py; EXPECT='r["parallel_mode"].endswith("DISTRIBUTED") and r["steps"] == 4' ;;
  *) echo "unknown framework $FRAMEWORK"; exit 2 ;;
esac
cd "$HERE" || exit 1
env PATH="$VENV_BIN:$PATH" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$HERE" \
  "$MESHRUN" --standalone --nproc-per-node 2 "$JOB" "$OUT" > "$OUT/log" 2>&1
rc=$?
[ "$rc" = 0 ] || { cat "$OUT/log"; echo "FAILED: $FRAMEWORK: meshrun exited $rc"; exit 1; }
"$VENV_BIN/python" - "$OUT" "$FRAMEWORK" "$EXPECT" << 'PY'
import glob, json, sys
out, framework, expect = sys.argv[1:4]
records = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/{framework}.*.json"))]
problems = []
if len(records) != 2:
    problems.append(f"{len(records)} of 2 ranks reported")
for r in records:
    print(framework, {k: v for k, v in r.items() if k != "framework"})
    if r["world_size"] != 2 or r["rank"] != r["env_rank"]:
        problems.append(f"rank {r['env_rank']}: the framework sees rank {r['rank']} of {r['world_size']}")
    if not r["spawned_by_meshrun"]:
        problems.append(f"rank {r['env_rank']} runs in a process the framework started, not meshrun's worker")
    if not eval(expect):
        problems.append(f"rank {r['env_rank']}: not {expect}")
if len(records) == 2 and abs(records[0]["checksum"] - records[1]["checksum"]) > 1e-9 * max(1.0, abs(records[0]["checksum"])):
    problems.append(f"the ranks ended with different weights: {records[0]['checksum']} vs {records[1]['checksum']}")
for p in problems:
    print(f"FAILED: {framework}: {p}")
sys.exit(1 if problems else 0)
PY
