"""A PyTorch training loop that tells meshrun how far it got (docs/progress.md).

    meshrun --nproc-per-node 2 examples/progress_beats.py

Each step sends one datagram to the socket meshrun names in MESHRUN_PROGRESS: with beats, meshrun names
a rank that hangs (and restarts or stops the job), names stragglers, and shows steps and loss in
`meshrun-rendezvous status`. Without meshrun (no MESHRUN_PROGRESS) the beats are skipped.
"""
import os
import socket
import time

import torch
import torch.distributed as dist

_beat_socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)


def beat(step, **fields):
    """One progress beat: "step=N key=value ...". Never blocks, never raises."""
    text = " ".join([f"step={step}"] + [f"{k}={v}" for k, v in fields.items()])
    try:
        _beat_socket.sendto(text.encode(), os.environ["MESHRUN_PROGRESS"])
    except (KeyError, OSError):
        pass  # not under meshrun, or the agent is busy: training goes on


def main():
    dist.init_process_group("gloo")
    model = torch.nn.Linear(64, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, 201):
        started = time.perf_counter()
        x = torch.randn(32, 64)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        compute_s = time.perf_counter() - started  # before waiting for the other ranks
        for p in model.parameters():
            dist.all_reduce(p.grad)
        optimizer.step()
        beat(step, loss=f"{loss.item():.4f}", compute_s=f"{compute_s:.6f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
