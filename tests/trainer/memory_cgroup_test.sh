#!/bin/bash
# Copies in memory on a node whose cgroup is short of memory (docs/checkpoints.md, "Memory check"): meshrun and
# its two workers (the small config: 145 MiB per rank's copy, four of them per rank with the buddy's) run in a
# memory cgroup made here, limited to 1.25 GiB: room to train (peak RSS 0.95 GiB), not for the copies. Every
# rank turns the copies off at start and says why, naming that cgroup's limit; the job trains on and ends well.
# The cgroup is v2's when this host's unified hierarchy has the memory controller, else v1's memory hierarchy.
# Usage: memory_cgroup_test.sh MESHRUN TRAINER CONFIG_DIR   (root)
MESHRUN=$1 TRAINER=$2 CONFIGS=$3
# shellcheck source=../support/skip.sh
source "$(dirname "$0")/../support/skip.sh"
[ "$(id -u)" = 0 ] || skip_or_fail "making a memory cgroup needs root (running as uid $(id -u))"
LIMIT=$((1280 * 1024 * 1024))
W=$(mktemp -d)
if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2> /dev/null; then
  REL=/meshrun-test-$$ GROUP=/sys/fs/cgroup/meshrun-test-$$ LIMIT_FILE=memory.max
  grep -qw memory /sys/fs/cgroup/cgroup.subtree_control || echo +memory > /sys/fs/cgroup/cgroup.subtree_control
else
  own=$(sed -n 's/^[0-9]*:\([a-z,]*,\)\{0,1\}memory\(,[a-z,]*\)\{0,1\}://p' /proc/self/cgroup)
  REL=${own%/}/meshrun-test-$$ GROUP=/sys/fs/cgroup/memory${own%/}/meshrun-test-$$ LIMIT_FILE=memory.limit_in_bytes
fi
cleanup() {
  [ -f "$GROUP/cgroup.procs" ] && xargs -r kill -9 < "$GROUP/cgroup.procs" 2> /dev/null
  sleep 0.2
  rmdir "$GROUP" 2> /dev/null
  rm -rf "$W"
}
trap cleanup EXIT
mkdir "$GROUP" || { echo "FAILED: cannot make the cgroup $GROUP (run as root)"; exit 1; }
echo "$LIMIT" > "$GROUP/$LIMIT_FILE" || { echo "FAILED: cannot limit $GROUP"; exit 1; }
fails=0
fail() { echo "FAILED: $*"; fails=1; }
# The shell moves itself into the group, then becomes meshrun: the agent and its workers are all in it.
OMP_NUM_THREADS=1 sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$GROUP" \
  "$MESHRUN" --standalone --nproc-per-node 2 --no-python "$TRAINER" --config "$CONFIGS/small.json" \
  --set train.steps=3 --set train.seq_len=128 --set train.global_batch_size=2 --set train.sample_tokens=0 \
  --set train.log_interval=1 --set output.progress_bar=false --set checkpoint.memory_interval=1 \
  --set "output.dir=\"$W/out\"" --set "checkpoint.dir=\"$W/ck\"" > "$W/job.log" 2>&1
code=$?
[ "$code" = 0 ] || fail "the job exited $code"
grep -q "checkpoint: copies in memory are off: rank [01]: the meshrun agent refused: copies in memory need .* GiB more on this node and it has .* GiB to spare (cgroup $REL $LIMIT_FILE 1.25 GiB; half is kept for training); storage checkpoints only" "$W/job.log" ||
  fail "no rank says the copies are off because of the cgroup's limit"
for rank in 0 1; do  # every rank's copies refused, each with the reason
  grep -q "memory: rank $rank's copies in memory refused: .*cgroup $REL $LIMIT_FILE" "$W/job.log" ||
    fail "the agent does not say why it refused rank $rank's copies"
done
grep -q "step *3 | loss" "$W/job.log" || fail "the job did not train to step 3"
[ "$fails" = 0 ] || cat "$W/job.log"
exit $fails
