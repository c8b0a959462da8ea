# A small PyTorch Gloo DDP job for bench/faults/recovery.sh, the same under meshrun and torchrun: a linear model,
# one all-reduce per step, a checkpoint every CKPT steps (rank 0, atomic), resumed from it after a restart.
# Rank 0 appends "step <n> <unix time> <restart count>" to OUT/steps.log after every step: the bench reads
# the first step after a fault from it (an independent stopwatch: no launcher's own figures).
#   recovery_job.py OUT STEPS CKPT
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

out, steps, ckpt_every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(256, 256))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ckpt = os.path.join(out, "ckpt.pt")
start = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["step"] + 1
restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
for step in range(start, steps):
    loss = model(torch.randn(64, 256)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 0:
        with open(os.path.join(out, "steps.log"), "a") as f:
            f.write(f"step {step} {time.time():.3f} {restart}\n")
        if step % ckpt_every == 0:
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
    time.sleep(0.05)
dist.destroy_process_group()
