"""Jobs as people run them, for the "right by default" table (tests/launcher/defaults_test.sh, bench/faults/hang_defaults.sh):
an unmodified PyTorch Gloo script, no beats, no meshrun code, 3 ranks. One row per run:

    default_jobs.py ROW SECONDS OUT

  healthy: the job must end 0, as under torchrun
    save        rank 0 writes a checkpoint for SECONDS (1 MiB writes at about 20 MB/s: slow storage) while
                ranks 1-2 wait in barrier()
    eval        rank 0 evaluates for SECONDS (CPU) while the others wait in all_reduce
    compile     rank 1 compiles / warms up for SECONDS (CPU) before collective #1, the others wait in it
    dataloader  rank 0's main process waits SECONDS on its two DataLoader workers, which compute, while the
                others wait in all_reduce
  stuck: the rank must be named hung
    lock        rank 2 blocks on a lock (idle) before collective #2
    socket      rank 2 blocks reading a socket whose peer never sends, before collective #1
  neither: busy forever
    spin        rank 1 spins in a Python loop before collective #3 (late; hung only past --hang-busy-timeout)

Every rank writes OUT/started.<rank> once its process group is up and OUT/done.<rank> at a clean end; the
rank at fault writes OUT/fault (time.time()) when its fault begins, for the bench.
"""
import os
import socket
import sys
import threading
import time

import torch
import torch.distributed as dist

ROW, SECONDS, OUT = sys.argv[1], float(sys.argv[2]), sys.argv[3]


def mark_fault():
    with open(os.path.join(OUT, ".fault"), "w") as f:
        f.write(f"{time.time():.3f}\n")
    os.replace(os.path.join(OUT, ".fault"), os.path.join(OUT, "fault"))


def save(path, seconds):
    chunk = os.urandom(1 << 20)
    end = time.monotonic() + seconds
    with open(path, "wb") as f:
        while time.monotonic() < end:
            f.write(chunk)
            f.flush()
            time.sleep(0.05)
            if f.tell() > (256 << 20):
                f.seek(0)
    os.unlink(path)


def evaluate(seconds):
    torch.set_num_threads(1)
    a = torch.randn(256, 256)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        a = (a @ a).tanh()
    return a.sum()


class SlowBatches(torch.utils.data.Dataset):
    def __init__(self, seconds):
        self.seconds = seconds

    def __len__(self):
        return 2

    def __getitem__(self, i):
        return evaluate(self.seconds)


def wait_on_loader(seconds):
    loader = torch.utils.data.DataLoader(SlowBatches(seconds), batch_size=1, num_workers=2)
    for _ in loader:
        pass


def step(x):
    dist.all_reduce(x)
    time.sleep(0.05)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    open(os.path.join(OUT, f"started.{rank}"), "w").close()
    x = torch.ones(4)
    if ROW == "compile" and rank == 1:
        mark_fault()
        evaluate(SECONDS)
    if ROW == "socket" and rank == 2:
        mark_fault()
        mine, peer = socket.socketpair()
        mine.recv(1)  # the peer never sends
    step(x)  # collective #1
    if ROW == "lock" and rank == 2:
        mark_fault()
        lock = threading.Lock()
        lock.acquire()
        lock.acquire()  # never released
    step(x)  # collective #2
    if ROW == "spin" and rank == 1:
        mark_fault()
        n = 0
        while True:
            n += 1
    for _ in range(3):
        step(x)
    if ROW == "save":
        if rank == 0:
            mark_fault()
            save(os.path.join(OUT, "checkpoint.bin"), SECONDS)
        dist.barrier()
    if ROW == "eval":
        loss = torch.zeros(1)
        if rank == 0:
            mark_fault()
            loss += evaluate(SECONDS)
        dist.all_reduce(loss)
    if ROW == "dataloader":
        if rank == 0:
            mark_fault()
            wait_on_loader(SECONDS)
        step(x)
    for _ in range(3):
        step(x)
    with open(os.path.join(OUT, f"done.{rank}"), "w") as f:
        f.write("ok\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
