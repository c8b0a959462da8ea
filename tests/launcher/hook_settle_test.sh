#!/bin/bash
# The guard of meshrun's fix for PyTorch's teardown race (docs/launcher.md, "Ending a script"): a worker that
# used torch.distributed gets the hook's pause at exit, after the script's own atexit handlers (the pause that
# closes the window of the abort half the scripts that end without destroy_process_group() meet under
# torchrun: bench/control/teardown.sh); a worker that never imported torch.distributed gets none, and neither does one
# under --hang-timeout off. The pause does not depend on how the script ends, so every run here ends with
# destroy_process_group() (never an abort: 0 in bench/control/teardown.sh), and no run can lose the race by luck; the
# script replaces time.sleep with one that writes down every call, so the hook's pause is seen.
# Usage: hook_settle_test.sh MESHRUN PYTHON
MESHRUN=$1 PYTHON=$2
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
cat > "$W/worker.py" << 'EOF2'
import atexit
import sys
import time

marker, mode = sys.argv[1], sys.argv[2]
real_sleep = time.sleep


def recording_sleep(seconds):
    with open(marker, "a") as f:
        f.write(f"sleep {seconds}\n")
    real_sleep(seconds)


time.sleep = recording_sleep
if mode == "destroy":
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(4)
    dist.all_reduce(t)
    assert t[0].item() == dist.get_world_size()
    dist.destroy_process_group()  # the ending that never aborts: no run here depends on luck


@atexit.register
def script_exit():
    with open(marker, "a") as f:
        f.write("script atexit\n")
EOF2
fails=0
fail() { echo "FAILED: $*"; fails=1; }
run() {  # NAME MODE [meshrun flags...]: runs one worker, its marker in $W/NAME.$RANK
  local name=$1 mode=$2; shift 2
  "$MESHRUN" --standalone --nproc-per-node 2 "$@" --no-python \
    bash -c "exec '$PYTHON' '$W/worker.py' '$W/$name.'\$RANK $mode" > "$W/$name.out" 2>&1 \
    || { fail "$name: meshrun exited $?"; cat "$W/$name.out"; }
}
run dist destroy
run plain plain
run nohook destroy --hang-timeout off
for rank in 0 1; do
  [ "$(tail -n 2 "$W/dist.$rank" 2>/dev/null | tr '\n' '|')" = "script atexit|sleep 0.02|" ] \
    || fail "rank $rank: no 20 ms pause after the script's own atexit work: $(tr '\n' '|' < "$W/dist.$rank")"
  grep -q "sleep 0.02" "$W/plain.$rank" && fail "rank $rank: a pause without torch.distributed"
  grep -q "sleep 0.02" "$W/nohook.$rank" && fail "rank $rank: a pause with --hang-timeout off (no hook)"
  for name in plain nohook; do
    grep -q "script atexit" "$W/$name.$rank" || fail "rank $rank ($name): the script's atexit did not run"
  done
done
exit $fails
