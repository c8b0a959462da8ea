#!/bin/bash
# meshrun under a real SLURM (slurmctld on node0, one slurmd per node namespace): `srun -N3` starting meshrun
# with no rendezvous flags gives 3 nodes x 2 workers with unique ranks and the right WORLD_SIZE; scancel
# stops everything with no process left behind; scripts/sbatch_fsdp.sbatch, submitted with sbatch as a batch
# job, completes with its output file written.
# Usage: slurm_test.sh MESHRUN REPO_ROOT   (root; exits 77 when namespaces cannot be made)
MESHRUN=$1 ROOT=$2
WORKER=$(cd "$(dirname "$0")" && pwd)/worker.sh
source "$(dirname "$0")/cluster.sh"
mc_init 3
mc_slurm_up || { mc_fail "SLURM did not come up"; cat "$MC_DIR"/slurm/*.log; exit 1; }
W=$MC_DIR/work; mkdir -p "$W"; cd "$W" || exit 1

# 1. srun -N3 --ntasks-per-node=1 meshrun --nproc-per-node 2 ...: ranks 0..5, WORLD_SIZE 6, run id = job id.
J=srun1; D=$W/$J; mkdir -p "$D"
mc_spawn 0 "$W/$J.log" env MC_JOB=$J srun -N3 --ntasks-per-node=1 -o "$W/$J.out" \
  "$MESHRUN" --nproc-per-node 2 --log-level info --no-python "$WORKER" "$D"
P=$MC_PID
for _ in $(seq 300); do [ "$(mc_count_files "$D" '^a0\.r')" = 6 ] || ! kill -0 $P 2> /dev/null && break; sleep 0.1; done
touch "$D/finish"
mc_wait_exit $P 60; echo "== $J (rc=$MC_RC)"; cat "$W/$J.log" "$W/$J.out"
[ "$MC_RC" = 0 ] || mc_fail "$J: srun exit status $MC_RC"
JOBID=$(sed -n 's/^TORCHELASTIC_RUN_ID=//p' "$D/a0.r0" 2> /dev/null)
[ -n "$JOBID" ] && [ "$JOBID" -gt 0 ] 2> /dev/null || mc_fail "$J: TORCHELASTIC_RUN_ID is not the job id: '$JOBID'"
for r in 0 1 2 3 4 5; do
  f=$D/a0.r$r
  [ -f "$f" ] || { mc_fail "$J: rank $r did not run"; continue; }
  grep -qx "WORLD_SIZE=6" "$f" || mc_fail "$J: rank $r: $(grep WORLD_SIZE "$f")"
  grep -qx "GROUP_RANK=$((r / 2))" "$f" || mc_fail "$J: rank $r: $(grep GROUP_RANK "$f"), expected node $((r / 2))"
  grep -qx "MASTER_ADDR=$(mc_ip 0)" "$f" || mc_fail "$J: rank $r: $(grep MASTER_ADDR "$f"), expected node0's address"
  grep -qx "TORCHELASTIC_RUN_ID=$JOBID" "$f" || mc_fail "$J: rank $r has another run id"
done
grep -q "SLURM job $JOBID: node 0 of 3, rendezvous at node0:" "$W/$J.out" || mc_fail "$J: no SLURM detection note"
mc_expect_gone MC_JOB=$J 10

# 2. scancel of a running job: meshrun gets SIGTERM from slurmd, stops its workers; nothing is left.
J=srun2; D=$W/$J; mkdir -p "$D"
mc_spawn 0 "$W/$J.log" env MC_JOB=$J srun -N3 --ntasks-per-node=1 -J mc-cancel "$MESHRUN" --nproc-per-node 2 \
  --shutdown-timeout 3 --no-python "$WORKER" "$D"
P=$MC_PID
for _ in $(seq 300); do [ "$(mc_count_files "$D" '^a0\.r')" = 6 ] || ! kill -0 $P 2> /dev/null && break; sleep 0.1; done
[ "$(mc_count_files "$D" '^a0\.r')" = 6 ] || mc_fail "$J: the job did not start 6 workers"
t0=$(mc_now)
mc_on 0 scancel --name mc-cancel
mc_wait_exit $P 60; echo "== $J: scancel (srun rc=$MC_RC after $(mc_elapsed "$t0") s)"; cat "$W/$J.log"
mc_expect_gone MC_JOB=$J 20 && echo "== $J: nothing left on any node $(mc_elapsed "$t0") s after scancel"
# slurmctld keeps a cancelled job COMPLETING for a moment after its processes are gone: wait (bounded).
for _ in $(seq 100); do [ -z "$(mc_on 0 squeue -h)" ] && break; sleep 0.2; done
[ -z "$(mc_on 0 squeue -h)" ] || mc_fail "$J: jobs still queued 20 s after scancel: $(mc_on 0 squeue -h)"

# 3. The sbatch example submitted as a batch job (sbatch --wait), with a stand-in for meshrun-trainer. The
#    command line overrides what these nodes lack (GPUs, 32 CPUs); the script's other directives stand.
J=sbatch; D=$W/$J; mkdir -p "$D"; touch "$D/finish"
printf '#!/bin/sh\n# stands in for meshrun-trainer --config ...\nexec %s %s\n' "$WORKER" "$D" > "$W/fake_trainer"
chmod +x "$W/fake_trainer"
mc_spawn 0 "$W/$J.log" env MC_JOB=$J MESHRUN="$MESHRUN" TRAINER="$W/fake_trainer" MESHRUN_ARGS="--nproc-per-node 2" \
  sbatch --wait -N3 --gpus-per-node=0 --cpus-per-task=1 --output="$W/$J-%j.out" --chdir="$W" \
  "$ROOT/scripts/sbatch_fsdp.sbatch"
mc_wait_exit $MC_PID 120; echo "== $J (sbatch rc=$MC_RC)"; cat "$W/$J.log"
[ "$MC_RC" = 0 ] || mc_fail "$J: sbatch --wait exit status $MC_RC"
BATCH_ID=$(sed -n 's/^Submitted batch job //p' "$W/$J.log")
[ -n "$BATCH_ID" ] || mc_fail "$J: sbatch did not submit a job"
OUT=$W/$J-$BATCH_ID.out
echo "-- $OUT"; cat "$OUT" 2> /dev/null
grep -q "^job $BATCH_ID: 3 node(s)" "$OUT" 2> /dev/null || mc_fail "$J: the job's output file $OUT lacks its first line"
STATE=$(mc_on 0 scontrol -o show job "$BATCH_ID" 2> /dev/null | grep -o 'JobState=[A-Z]* .*ExitCode=[0-9:]*')
echo "-- $STATE"
case $STATE in JobState=COMPLETED*ExitCode=0:0) ;; *) mc_fail "$J: job $BATCH_ID ended as '$STATE'" ;; esac
[ "$(mc_count_files "$D" '^a0\.r')" = 6 ] || mc_fail "$J: expected 6 workers: $(ls "$D")"
grep -qx "WORLD_SIZE=6" "$D/a0.r5" 2> /dev/null || mc_fail "$J: rank 5 lacks WORLD_SIZE=6"
grep -qx "TORCHELASTIC_RUN_ID=$BATCH_ID" "$D/a0.r0" 2> /dev/null || mc_fail "$J: the run id is not the batch job's id"
mc_expect_gone MC_JOB=$J 10

echo "$MC_FAILS failure(s)"
[ "$MC_FAILS" = 0 ]
