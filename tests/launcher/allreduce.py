# Launched by test_launch_pytorch.cpp as `meshrun --standalone --nproc-per-node 3 allreduce.py OUT_DIR`:
# init_process_group over env:// (meshrun's store), one all_reduce, then each rank writes what it saw.
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
with open(os.path.join(sys.argv[1], f"rank{rank}.txt"), "w") as f:
    f.write(f"{rank} {world} {os.environ['LOCAL_RANK']} {t.item():.0f}\n")
dist.destroy_process_group()
