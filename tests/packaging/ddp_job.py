"""A real PyTorch DDP job (Gloo, CPU) for the packaging tests, started as
`meshrun --standalone --nproc-per-node 2 ddp_job.py OUT_DIR` from the environment under test.

Every rank runs one SGD step (lr 0.1) of a bias-free Linear(4, 1) whose weights start at 1, on a batch of
2 rows filled with rank+1. The gradient of the summed output on rank r is 2*(r+1) per weight; DDP averages it
over the ranks, so with 2 ranks every rank must hold 3 and then weights of 1 - 0.1*3 = 0.7. It also
all-reduces rank+1 (2 ranks: 3). Each rank asserts both, then writes what it saw to OUT_DIR/rank<N>.json
(the test compares the ranks and checks the Python and environment meshrun gave them).
"""
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")  # env:// from meshrun: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
rank, world = dist.get_rank(), dist.get_world_size()

model = torch.nn.Linear(4, 1, bias=False)
with torch.no_grad():
    model.weight.fill_(1.0)
ddp = DistributedDataParallel(model)
optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
ddp(torch.full((2, 4), float(rank + 1))).sum().backward()
mean_grad = sum(2.0 * (r + 1) for r in range(world)) / world
grad = model.weight.grad
assert torch.allclose(grad, torch.full_like(grad, mean_grad)), f"rank {rank}: grad {grad} != {mean_grad}"
optimizer.step()

total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
assert total.item() == world * (world + 1) / 2, f"rank {rank}: all_reduce gave {total.item()}"

with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as f:
    json.dump({"rank": rank, "world": world, "grad": grad.flatten().tolist(),
               "weight": model.weight.detach().flatten().tolist(), "all_reduce": total.item(),
               "prefix": sys.prefix, "local_rank": int(os.environ["LOCAL_RANK"])}, f)
# DDP holds the process group: drop it first so that destroy_process_group() really destroys the group and
# joins Gloo's threads. Left alive, a Gloo thread can free the last collective's tensors while Python is
# finalizing and abort the worker ("terminate called without an active exception", pytorch#190489).
del ddp, optimizer
dist.destroy_process_group()
