"""A Gloo job that sends progress beats (docs/progress.md) and misbehaves on request, for test_progress.cpp.

    progress_job.py STEPS STEP_S [options]
      --stop-rank R --stop-at K      rank R SIGSTOPs itself after step K (first attempt only)
      --block-rank R --block-at K    rank R blocks forever in block_forever() in step K (first attempt only)
      --slow-rank R --slow-factor F  rank R computes F times longer per step (compute_s says so)
      --first-step-s S               every rank's first step takes S seconds (compilation, data loading)
      --checkpoint-at K --checkpoint-s S  every rank reports phase=checkpoint after step K and takes S seconds
      --silent-rank R                rank R sends no beats at all
      --backend gloo|nccl            the process group (nccl: a CUDA tensor on GPU LOCAL_RANK)
      --raise-rank R --raise-at K    rank R raises RuntimeError in step K (first attempt only); the others
                                     then die of the broken collective (or are stopped)
Each step: compute (sleep STEP_S), beat, all_reduce (the ranks wait for each other as in real training).
Writes OUT/done.<rank> at the end, and OUT/blocked.<rank> / OUT/stopped.<rank> (the time) when it blocks or
stops itself, when OUT is set in the environment (PROGRESS_JOB_OUT).
"""
import argparse
import os
import signal
import socket
import time

import torch
import torch.distributed as dist

_sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)


def beat(step, **fields):
    text = " ".join([f"step={step}"] + [f"{k}={v}" for k, v in fields.items()])
    try:
        _sock.sendto(text.encode(), os.environ["MESHRUN_PROGRESS"])
    except (KeyError, OSError):
        pass


def mark(name):
    """OUT/<name>: when something was done to this rank (the benchmark times detection from it)."""
    out = os.environ.get("PROGRESS_JOB_OUT")
    if out:
        with open(os.path.join(out, name), "w") as f:
            f.write(repr(time.time()))


def block_forever():
    mark(f"blocked.{dist.get_rank()}")
    read_end, _ = os.pipe()
    os.read(read_end, 1)  # nobody ever writes: a stand-in for a collective that never completes


def fail_on_purpose(rank, step):
    raise RuntimeError(f"rank {rank} failed on purpose in step {step}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("steps", type=int)
    p.add_argument("step_s", type=float)
    for flag in ("--stop-rank", "--stop-at", "--block-rank", "--block-at", "--slow-rank", "--checkpoint-at",
                 "--silent-rank", "--raise-rank", "--raise-at"):
        p.add_argument(flag, type=int, default=-1)
    p.add_argument("--slow-factor", type=float, default=1.0)
    p.add_argument("--first-step-s", type=float, default=0.0)
    p.add_argument("--checkpoint-s", type=float, default=0.0)
    p.add_argument("--backend", default="gloo", help="gloo (CPU tensors) or nccl (this rank's GPU)")
    a = p.parse_args()
    device = "cpu"
    if a.backend == "nccl":
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(device)
    dist.init_process_group(a.backend)
    rank = dist.get_rank()
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    silent = rank == a.silent_rank
    value = torch.zeros(1, device=device)
    for step in range(1, a.steps + 1):
        compute = a.step_s * (a.slow_factor if rank == a.slow_rank else 1.0)
        if step == 1:
            compute += a.first_step_s
        time.sleep(compute)
        if first_attempt and rank == a.raise_rank and step == a.raise_at:
            fail_on_purpose(rank, step)
        if first_attempt and rank == a.block_rank and step == a.block_at:
            block_forever()  # before its beat: the other ranks get one step further, then wait for it
        if not silent:
            beat(step, loss=f"{1.0 / step:.4f}", compute_s=f"{compute:.4f}")
        if first_attempt and rank == a.stop_rank and step == a.stop_at:
            mark(f"stopped.{rank}")
            os.kill(os.getpid(), signal.SIGSTOP)
        if step == a.checkpoint_at:
            if not silent:
                beat(step, phase="checkpoint")
            time.sleep(a.checkpoint_s)
        dist.all_reduce(value)
    dist.barrier()
    out = os.environ.get("PROGRESS_JOB_OUT")
    if out:
        with open(os.path.join(out, f"done.{rank}"), "w") as f:
            f.write(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
