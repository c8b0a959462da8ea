# A plain PyTorch Gloo training loop with no beats and no meshrun code (what users run), for the hang
# tests (tests/cluster/hang_test.sh) and bench/faults/hang.sh. One fault, chosen by the command line:
#   hang_job.py OUT FAULT CULPRIT STEP [STEPS]
#     none      no fault: STEPS steps of a matmul and an all_reduce, then exit 0
#     skip      rank CULPRIT skips the all_reduce of STEP and then waits on an event nothing sets (never enters it: a
#               deadlock; a sleep would be a wait that ends by itself, which meshrun calls late)
#     stop      rank CULPRIT stops itself (SIGSTOP) before STEP's all_reduce
#     spin      rank CULPRIT spins in a Python loop before STEP's all_reduce
#     mismatch  rank CULPRIT calls broadcast where the others all_reduce, at STEP
#     size      rank CULPRIT all-reduces 3 floats where the others reduce 1024, at STEP
#     subgroup  ranks pair up in groups of their own (new_group); every step all-reduces in the pair, the
#               default group stays idle; at STEP rank CULPRIT waits on an event nothing sets instead
#     pause     every rank pauses 12 s at STEP without collectives (a checkpoint), then goes on
#     pause_skip  pause at STEP, then skip (as above) at STEP + 40
#     nocoll    no collectives at all: a process group, 15 s of work, exit 0
#     slowfirst rank CULPRIT computes 10 s before its first all_reduce (a slow first step), the others wait in it
#     stoplate  at STEP, rank CULPRIT waits 3 s and then stops itself (SIGSTOP); rank CULPRIT + 1 waits 3 s too,
#               so the other node's ranks are the first to wait: that node suspects first
# Every rank writes OUT/started.<rank> once the group is up and OUT/done.<rank> at a clean end (holding
# the step loop's seconds); the culprit writes OUT/fault (time.time()) when its fault begins (bench/faults/hang.sh).
import datetime
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist

out, fault, culprit, at = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
steps = int(sys.argv[5]) if len(sys.argv) > 5 else 1000000
dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=30))
rank = dist.get_rank()
sub = None
if fault == "subgroup":
    groups = [dist.new_group([r, r + 1]) for r in range(0, dist.get_world_size(), 2)]
    sub = groups[dist.get_rank() // 2]
if fault == "pause_skip":
    fault, pause_at, at = "skip", at, at + 40
else:
    pause_at = at if fault == "pause" else -1
open(os.path.join(out, f"started.{rank}"), "w").close()
weights = torch.randn(256, 256)
grad = torch.zeros(1024)


def mark_fault():
    with open(os.path.join(out, ".fault"), "w") as f:
        f.write(f"{time.time():.3f}\n")
    os.replace(os.path.join(out, ".fault"), os.path.join(out, "fault"))


def train_step(step):
    x = torch.randn(64, 256)
    grad.copy_((x @ weights).sum(0).repeat(4)[:1024])
    if step == at and rank == culprit and fault != "none":
        mark_fault()
        if fault == "skip":
            threading.Event().wait()
        if fault == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        if fault == "stoplate":
            time.sleep(3)
            os.kill(os.getpid(), signal.SIGSTOP)
        if fault == "spin":
            n = 0
            while True:
                n += 1
        if fault == "mismatch":
            dist.broadcast(grad, src=0)
            return
        if fault == "size":
            dist.all_reduce(torch.ones(3))
            return
    if fault == "subgroup":  # every step in the pair group; the default group stays idle
        if step == at and rank == culprit:
            mark_fault()
            threading.Event().wait()
        dist.all_reduce(grad, group=sub)
        return
    if step == at and fault == "stoplate" and rank == culprit + 1:
        time.sleep(3)
    if step == pause_at:
        time.sleep(12)
    if fault == "slowfirst" and step == 0 and rank == culprit:
        end = time.monotonic() + 10
        while time.monotonic() < end:  # compiling, warming up: busy
            x = weights @ weights
    dist.all_reduce(grad)


start = time.perf_counter()
if fault == "nocoll":
    time.sleep(15)
else:
    for step in range(steps):
        train_step(step)
        time.sleep(0.02)
with open(os.path.join(out, f"done.{rank}"), "w") as f:
    f.write(f"{time.perf_counter() - start:.4f}\n")
dist.destroy_process_group()
