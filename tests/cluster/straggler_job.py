# A plain PyTorch Gloo loop with no meshrun code, for the straggler tests (tests/cluster/straggler_test.sh)
# and bench/faults/progress.sh:
#   straggler_job.py OUT STEPS STEP_MS [SLOW_RANK FACTOR] [--work] [--beats] [--for=SECONDS | --for-job=SECONDS]
#                    [--rate-log=FILE [--rate-every=N]]
# Each step every rank computes for STEP_MS ms, SLOW_RANK for FACTOR times as long, then all-reduces twice
# (two collectives per step, like a model in two buckets). The compute is a busy loop (real compute, not a
# sleep) that runs for that long by the clock, or with --work a fixed amount of work calibrated at the start
# to take that long, so that a CPU limit set while it runs makes the step longer. --beats: every rank beats
# each step it ends, with its compute time (docs/progress.md); without, nothing but its collectives.
# --for=SECONDS: as many steps as fit in that time (the ranks agree every 50 steps, in one more all-reduce).
# --for-job=SECONDS: the same from the job's first start (OUT/started, kept across restarts), so a job restarted
# from step 0 still ends when that time is up. --rate-log=FILE: rank 0 appends "UNIX_TIME STEPS_DONE" every N
# steps (--rate-every, 50; bench/faults/straggler_evict.sh reads the job's own rate from it).
# Every rank writes OUT/done.<rank> at a clean end.
import os
import socket
import sys
import time

import torch
import torch.distributed as dist

flags = {a.split("=")[0] for a in sys.argv[1:] if a.startswith("--")}
def option(name):
    return next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith(name + "=")), None)


run_for_s = float(option("--for") or option("--for-job") or 0) or None
rate_log = option("--rate-log")
rate_every = int(option("--rate-every") or 50)
args = [a for a in sys.argv[1:] if not a.startswith("--")]
out, steps, step_ms = args[0], int(args[1]), float(args[2])
slow_rank = int(args[3]) if len(args) > 3 else -1
factor = float(args[4]) if len(args) > 4 else 1.0
dist.init_process_group("gloo")
rank = dist.get_rank()
busy_s = step_ms / 1000 * (factor if rank == slow_rank else 1.0)
grads = [torch.ones(1024), torch.ones(256)]
beats = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK) if "--beats" in flags else None


def work(n):
    x = 0.0
    for i in range(n):
        x = x * 0.999 + i
    return x


def calibrate(seconds):  # iterations of work() that take `seconds` here, now
    n, took = 1000, 0.0
    while took < 0.2:
        n *= 2
        start = time.perf_counter()
        work(n)
        took = time.perf_counter() - start
    return max(1, int(n * seconds / took))


half_work = 0
if "--work" in flags:  # the same work on every rank: the mean of their calibrations (one may have met a busy core)
    n = torch.tensor([float(calibrate(step_ms / 1000 / 2))])
    dist.all_reduce(n)
    half_work = int(n.item() / dist.get_world_size() * (factor if rank == slow_rank else 1.0))


def compute_half():
    if half_work:
        work(half_work)
        return
    until = time.perf_counter() + busy_s / 2
    while time.perf_counter() < until:
        pass


started = time.monotonic()
if option("--for-job") is not None:  # from the job's first start: the earliest any attempt recorded
    path = os.path.join(out, "started")
    first = float(open(path).read()) if os.path.exists(path) else time.time()
    first_t = torch.tensor([first], dtype=torch.float64)
    dist.all_reduce(first_t, op=dist.ReduceOp.MIN)
    if rank == 0 and not os.path.exists(path):
        with open(path, "w") as f:
            f.write(repr(first_t.item()))
    started -= time.time() - first_t.item()


def time_is_up(step):
    if run_for_s is None or (step + 1) % 50:
        return False
    up = torch.tensor([1.0 if time.monotonic() - started >= run_for_s else 0.0])
    dist.all_reduce(up)  # every rank stops after the same step
    return up.item() > 0


for step in range(steps):
    compute_s = 0.0
    for g in grads:
        start = time.perf_counter()
        compute_half()  # half the compute before each bucket's reduction
        compute_s += time.perf_counter() - start
        dist.all_reduce(g)
    if beats is not None:
        try:
            beats.sendto(f"step={step + 1} compute_s={compute_s:.6f}".encode(), os.environ["MESHRUN_PROGRESS"])
        except (KeyError, OSError):
            pass
    if rate_log and rank == 0 and (step + 1) % rate_every == 0:
        with open(rate_log, "a") as f:
            f.write(f"{time.time():.3f} {step + 1}\n")
    if time_is_up(step):
        break
dist.barrier()
open(os.path.join(out, f"done.{rank}"), "w").close()
dist.destroy_process_group()
