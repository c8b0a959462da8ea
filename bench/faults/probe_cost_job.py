"""The job of bench/faults/probe_cost.sh: a plain PyTorch Gloo loop with no meshrun code, a fixed amount of
pure-Python work per step (the GIL held, as in a Python-heavy training loop) and two all-reduces.

    probe_cost_job.py OUT STEPS ITERATIONS

Rank 0 writes the loop's seconds (time.monotonic(), after one warm-up step) to OUT.
"""
import sys
import time

import torch
import torch.distributed as dist

out, steps, iterations = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo")
grads = [torch.ones(1024), torch.ones(256)]


def work(n):
    x = 0.0
    for i in range(n):
        x = x * 0.999 + i
    return x


def step():
    for g in grads:
        work(iterations)
        dist.all_reduce(g)


step()
started = time.monotonic()
for _ in range(steps):
    step()
took = time.monotonic() - started
if dist.get_rank() == 0:
    with open(out, "w") as f:
        f.write(f"{took:.6f}\n")
dist.destroy_process_group()
