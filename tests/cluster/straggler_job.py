# A plain PyTorch Gloo loop with no beats and no meshrun code, for the straggler tests
# (tests/cluster/straggler_test.sh) and bench/progress.sh:
#   straggler_job.py OUT STEPS STEP_MS [SLOW_RANK FACTOR]
# Each step every rank computes for STEP_MS ms (a busy loop: real compute, not a sleep), SLOW_RANK for
# FACTOR times as long, then all-reduces twice (two collectives per step, like a model in two buckets).
# Every rank writes OUT/done.<rank> at a clean end.
import os
import sys
import time

import torch
import torch.distributed as dist

out, steps, step_ms = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
slow_rank = int(sys.argv[4]) if len(sys.argv) > 4 else -1
factor = float(sys.argv[5]) if len(sys.argv) > 5 else 1.0
dist.init_process_group("gloo")
rank = dist.get_rank()
busy_s = step_ms / 1000 * (factor if rank == slow_rank else 1.0)
grads = [torch.ones(1024), torch.ones(256)]
for _ in range(steps):
    until = time.perf_counter() + busy_s / 2
    for g in grads:
        while time.perf_counter() < until:  # half the compute before each bucket's reduction
            pass
        dist.all_reduce(g)
        until = time.perf_counter() + busy_s / 2
dist.barrier()
open(os.path.join(out, f"done.{rank}"), "w").close()
dist.destroy_process_group()
