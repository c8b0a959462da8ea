#!/bin/bash
# The guard of meshrun's fix for PyTorch's teardown race (docs/launcher.md, "Ending a script"): a worker that
# used torch.distributed and ends without destroy_process_group() (the ending that aborts as often as not
# under torchrun, bench/teardown.sh) gets the hook's pause at exit, after the script's own atexit handlers;
# a worker that never imported torch.distributed gets none, and neither does one under --hang-timeout off.
# The race itself needs luck to strike; the pause that closes it does not: the script replaces time.sleep
# with one that writes down every call, so the hook's pause is seen whether or not the race would have struck.
# The run without the hook calls destroy_process_group() (0 aborts in bench/teardown.sh): it checks only that
# no pause is made, and the hook would pause there too, since torch.distributed was imported.
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
if mode in ("dist", "destroy"):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(4)
    dist.all_reduce(t)
    assert t[0].item() == dist.get_world_size()
    if mode == "destroy":
        # Without the hook nothing closes PyTorch's window, so this run ends the way that never aborts.
        dist.destroy_process_group()
    # Otherwise no destroy_process_group(): the script ends right after its last collective.


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
run dist dist
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
