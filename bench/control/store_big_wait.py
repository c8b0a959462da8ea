"""One client's huge request must not stall the others: while client A sets up a wait on N missing keys
(one per rank of an N-rank job), client B times its get() round trips. Our daemon and PyTorch's libuv
TCPStore server, side by side, through PyTorch's own Python client.
    .venv/bin/python bench/control/store_big_wait.py build/bin/meshrun-rendezvous [N ...]   (default 65536 131072)"""
import datetime
import subprocess
import sys
import threading
import time

import torch.distributed as dist


def stall(port, n):
    """Longest get() of B while A's wait is set up, and while C sets all the keys; seconds from C's
    multi_set to A's release."""
    timeout = datetime.timedelta(seconds=120)
    a = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
    b = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
    c = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)  # sets the keys
    b.set("probe", "x")
    keys = [f"big/{n}/{i}" for i in range(n)]
    done = threading.Event()
    worst = [0.0]

    def probe():
        while not done.is_set():
            t0 = time.perf_counter()
            b.get("probe")
            worst[0] = max(worst[0], time.perf_counter() - t0)

    prober = threading.Thread(target=probe)
    prober.start()
    parked = threading.Thread(target=lambda: a.wait(keys))
    parked.start()
    time.sleep(1.0)  # B keeps probing while A's request arrives and its wait is set up
    during_setup = worst[0]
    t1 = time.perf_counter()
    c.multi_set(keys, ["1"] * n)
    parked.join()
    release_s = time.perf_counter() - t1
    done.set()
    prober.join()
    return during_setup, worst[0], release_s


def main():
    daemon_bin = sys.argv[1]
    sizes = [int(x) for x in sys.argv[2:]] or [65536, 131072]
    ours = subprocess.Popen([daemon_bin, "--host", "127.0.0.1", "--port", "0", "--log-level", "warn"],
                            stdout=subprocess.PIPE, text=True)
    our_port = int(ours.stdout.readline().rsplit(":", 1)[1])
    theirs = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, use_libuv=True)
    try:
        print(f"{'keys':>8} {'server':>8} {'B worst get, setup (ms)':>24} {'B worst get, all (ms)':>22} "
              f"{'A released (ms)':>16}")
        for n in sizes:
            row = {}
            for name, port in (("meshrun", our_port), ("libuv", theirs.port)):
                setup, worst, release = stall(port, n)
                row[name] = (setup, worst, release)
                print(f"{n:>8} {name:>8} {setup * 1e3:>24.1f} {worst * 1e3:>22.1f} {release * 1e3:>16.1f}",
                      flush=True)
            ratios = [m / max(l, 1e-9) for m, l in zip(row["meshrun"], row["libuv"])]
            print(f"{n:>8} {'ratio':>8} {ratios[0]:>23.2f}x {ratios[1]:>21.2f}x {ratios[2]:>15.2f}x  (meshrun / libuv)")
    finally:
        ours.terminate()
        ours.wait(timeout=10)


if __name__ == "__main__":
    main()
