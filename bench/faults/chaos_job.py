# The training job of bench/faults/chaos.sh, a PyTorch Gloo DDP loop that beats its steps and checkpoints to its
# agent (docs/progress.md; the only meshrun-specific lines are the beats, and --no-beats drops them) and times
# its own work: rank 0 appends to OUT/steps.log
#   "step <n> <unix time at its start> <unix time at its end> <restart count>"   after every step
#   "ckpt <n> <unix time at its start> <unix time at its end>"                   around every checkpoint
# from which the bench computes productive time independently of meshrun (the steps' own durations, each step
# counted once). It trains until UNTIL (unix time), every rank agreeing on the stop through the step's
# all-reduce, and resumes from its last checkpoint after a restart. A checkpoint takes at least CKPT_SECONDS
# (a shared file system's latency).
#   chaos_job.py OUT UNTIL CKPT_EVERY CKPT_SECONDS [--no-beats]
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

out, until, ckpt_every, ckpt_seconds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
_beat = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)
beats = "--no-beats" not in sys.argv[5:]


def beat(step, **fields):
    if not beats:
        return
    try:
        text = " ".join([f"step={step}"] + [f"{k}={v}" for k, v in fields.items()])
        _beat.sendto(text.encode(), os.environ["MESHRUN_PROGRESS"])
    except (KeyError, OSError):
        pass


def log(line):
    with open(os.path.join(out, "steps.log"), "a") as f:
        f.write(line + "\n")


dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(256, 256))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ckpt = os.path.join(out, "ckpt.pt")
step = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    step = state["step"]
restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
while True:
    step += 1
    step_start = time.time()
    loss = model(torch.randn(64, 256)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    stop = torch.tensor([1.0 if time.time() > until else 0.0])
    dist.all_reduce(stop, op=dist.ReduceOp.MAX)
    time.sleep(0.05)  # the rest of a step's work
    if rank == 0:
        log(f"step {step} {step_start:.3f} {time.time():.3f} {restart}")
    beat(step, loss=f"{loss.item():.4f}")
    if step % ckpt_every == 0:
        beat(step, phase="checkpoint")
        started = time.time()
        if rank == 0:
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
            time.sleep(max(0.0, started + ckpt_seconds - time.time()))
        dist.barrier()
        if rank == 0:
            log(f"ckpt {step} {started:.3f} {time.time():.3f}")
        beat(step)
    if stop.item() > 0:
        break
dist.destroy_process_group()
