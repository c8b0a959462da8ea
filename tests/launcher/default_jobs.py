"""Jobs as people run them, for the "right by default" table (tests/launcher/defaults_test.sh, bench/faults/hang_defaults.sh):
an unmodified PyTorch Gloo script, no beats, no meshrun code, 3 ranks. One row per run:

    default_jobs.py ROW SECONDS OUT

  healthy: the job must end 0, as under torchrun
    save        rank 0 writes a checkpoint for SECONDS (1 MiB writes at about 20 MB/s: slow storage) while
                ranks 1-2 wait in barrier()
    eval        rank 0 evaluates for SECONDS (CPU, about a third of a core) while the others wait in all_reduce
    compile     rank 1 compiles / warms up for SECONDS (the same) before collective #1, the others wait in it
    dataloader  rank 0's main process waits SECONDS on its two DataLoader workers, which compute, while the
                others wait in all_reduce
  waiting on the world outside the job (idle, but not hung): the job must end 0, as under torchrun
    http        rank 0 asks a slow service (outside_world.py service, $SERVICE_PORT) for a score and gets it after
                SECONDS, while the others wait in barrier()
    poll        rank 0 polls every 2 s for OUT/flag, which an outside process writes SECONDS after it began
    retry       rank 0 sleeps SECONDS in a retry loop (three sleeps of a third each)
    child       rank 0 waits on a child process (subprocess.run) that waits SECONDS on the slow service
    download    rank 0 waits on a thread of its own (threading.Event) that downloads from the service at 16 kB/s for
                SECONDS
    pipe        rank 0 reads the named pipe $FEED to its end, fed a line every 5 s for SECONDS by an outside process
  stuck: the rank must be named hung
    lock        rank 2 blocks on a lock (idle) before collective #2
    socket      rank 2 blocks reading a socket whose other end its own process holds and never writes (a
                socketpair), before collective #1
    event       rank 2 waits on a threading.Event that nothing in its tree sets, before collective #2
    mismatch    rank 1 calls broadcast where the others call all_reduce, at collective #2
    cycle       ranks 0 and 1 call their collectives of two groups in opposite orders (a cycle across groups)
  neither: busy forever
    spin        rank 1 spins in a Python loop before collective #3 (late; hung only past --hang-busy-timeout)

Every rank writes OUT/started.<rank> once its process group is up and OUT/done.<rank> at a clean end; the
rank at fault writes OUT/fault (time.time()) when its fault begins, for the bench.
"""
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import torch
import torch.distributed as dist

ROW, SECONDS, OUT = sys.argv[1], float(sys.argv[2]), sys.argv[3]


def mark_fault():
    tmp = os.path.join(OUT, f".fault.{os.getpid()}")  # two ranks may mark at once (cycle)
    with open(tmp, "w") as f:
        f.write(f"{time.time():.3f}\n")
    os.replace(tmp, os.path.join(OUT, "fault"))


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
    # About a third of a core: well above what makes a rank busy (5 %), without taking a core of the machine the suite
    # runs its tests side by side on for the whole of SECONDS.
    torch.set_num_threads(1)
    a = torch.randn(256, 256)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        burst = time.monotonic() + 0.025
        while time.monotonic() < burst:
            a = (a @ a).tanh()
        time.sleep(0.05)
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


def service(path):
    return f"http://127.0.0.1:{os.environ['SERVICE_PORT']}{path}"


def ask_score():
    with urllib.request.urlopen(service("/score"), timeout=600) as reply:  # answers after SECONDS
        return reply.read()


def wait_for_flag():
    while not os.path.exists(os.path.join(OUT, "flag")):
        time.sleep(2)


def retry_sleeps(seconds):
    for _ in range(3):  # a retry loop against a rate limit
        time.sleep(seconds / 3)


def run_child():
    code = f"import urllib.request; urllib.request.urlopen({service('/score')!r}, timeout=600).read()"
    subprocess.run([sys.executable, "-c", code], check=True)


def download_in_thread():
    done = threading.Event()

    def download():
        with urllib.request.urlopen(service("/data"), timeout=600) as reply:
            while reply.read(16384):
                pass
        done.set()

    threading.Thread(target=download, name="downloader", daemon=True).start()
    done.wait()


def read_feed():
    with open(os.environ["FEED"]) as feed:
        return feed.read()


OUTSIDE = {"http": ask_score, "poll": wait_for_flag, "retry": lambda: retry_sleeps(SECONDS), "child": run_child,
           "download": download_in_thread, "pipe": read_feed}


def step(x):
    dist.all_reduce(x)
    time.sleep(0.05)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    pair = dist.new_group([0, 1]) if ROW == "cycle" else None
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
    if ROW == "event" and rank == 2:
        mark_fault()
        threading.Event().wait()  # nothing sets it
    if ROW == "mismatch" and rank == 1:
        mark_fault()
        dist.broadcast(x, src=0)  # the others all_reduce
    elif ROW == "cycle" and rank in (0, 1):
        mark_fault()
        first, then = (pair, None) if rank == 0 else (None, pair)
        dist.all_reduce(x, group=first)
        dist.all_reduce(x, group=then)
    else:
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
    if ROW in OUTSIDE:
        if rank == 0:
            mark_fault()
            OUTSIDE[ROW]()
        dist.barrier()
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
