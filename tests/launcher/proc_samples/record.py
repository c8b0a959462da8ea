"""Records the /proc files the stuck-or-busy rule reads (launcher/activity/) from real processes on this
machine, for tests/launcher/test_activity_unit.cpp. Not run by the suite: run it again to refresh the samples.

    .venv/bin/python tests/launcher/proc_samples/record.py [CASE ...]

Each case starts a process tree as ranks are found in practice, waits for it to settle, then copies every
process's stat, io and status (and every thread's children file) at two moments WINDOW_S apart into
<case>/t0/ and <case>/t1/, with meta.json (the leader's pid, the seconds between the copies, the expected
judgment). The files are kept verbatim.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WINDOW_S = 10.0
PY = sys.executable

# Every case: (expected liveness, python code run as the rank). The idle ones carry a thread that polls twice
# a second, as meshrun's hook does, so the noise is real.
HOOK_LIKE = """
import threading, time, json
def _poll():
    while True:
        time.sleep(0.5)
        json.dumps({"pg_status": {"0": {"last_enqueued_collective": 3, "last_completed_collective": 3}}})
threading.Thread(target=_poll, daemon=True).start()
"""
CASES = {
    "idle_lock": ("idle", HOOK_LIKE + """
import torch, threading
lock = threading.Lock(); lock.acquire()
ready()
lock.acquire()  # blocks forever: a rank stuck on a lock
"""),
    "idle_sleep_loop": ("idle", HOOK_LIKE + """
import time
ready()
while True:
    time.sleep(1)  # a rank that waits for something that never comes, checking once a second
"""),
    "compute": ("busy", """
import torch
torch.set_num_threads(1)
a = torch.randn(512, 512)
ready()
while True:
    a = (a @ a).tanh()  # an evaluation on this rank only
"""),
    "save_20mbs": ("busy", """
import os, time
chunk = os.urandom(1 << 20)
ready()
with open(os.environ["OUT"] + "/ckpt.bin", "wb") as f:
    while True:
        f.write(chunk); f.flush()
        time.sleep(0.05)  # 1 MiB every 50 ms: slow storage, about 20 MB/s
        f.seek(0) if f.tell() > (256 << 20) else None
"""),
    "dataloader": ("busy", """
import torch
from torch.utils.data import DataLoader, Dataset
class Slow(Dataset):
    def __len__(self): return 10**9
    def __getitem__(self, i):
        a = torch.randn(256, 256)
        for _ in range(200): a = (a @ a).tanh()
        return a.sum()
torch.set_num_threads(1)
ready()
for batch in DataLoader(Slow(), batch_size=64, num_workers=2):  # the main process waits on its workers
    pass
"""),
    "socket_silent": ("idle", HOOK_LIKE + """
import os, socket
s = socket.create_connection(("127.0.0.1", int(os.environ["PEER_PORT"])))
ready()
s.recv(1)  # a peer that never sends
"""),
    "socket_stream": ("busy", """
import os, socket
s = socket.create_connection(("127.0.0.1", int(os.environ["PEER_PORT"])))
ready()
while s.recv(16384):  # a stream from another host: recv is not counted in /proc/<pid>/io
    pass
"""),
    "spin": ("busy", """
n = 0
ready()
while True:
    n += 1  # spins forever
"""),
}


def tree(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in os.listdir(f"/proc/{p}/task"):
            try:
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
            except OSError:
                pass
    return out


def copy(pids, dest):
    for p in pids:
        d = os.path.join(dest, str(p))
        os.makedirs(d, exist_ok=True)
        for name in ("stat", "io", "status"):
            with open(f"/proc/{p}/{name}") as src, open(os.path.join(d, name), "w") as dst:
                dst.write(src.read())
        for task in os.listdir(f"/proc/{p}/task"):
            os.makedirs(os.path.join(d, "task", task), exist_ok=True)
            with open(f"/proc/{p}/task/{task}/children") as src, open(os.path.join(d, "task", task, "children"), "w") as dst:
                dst.write(src.read())


def stream_peer(server, stop_after_s, rate_bps):
    conn, _ = server.accept()
    chunk = b"x" * 16384
    end = time.monotonic() + stop_after_s
    while time.monotonic() < end:
        try:
            conn.sendall(chunk)
        except OSError:  # the rank was killed: the recording is done
            return
        time.sleep(len(chunk) / rate_bps)
    conn.close()


def record(name):
    liveness, code = CASES[name]
    out = os.path.join(HERE, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    server = socket.create_server(("127.0.0.1", 0))
    env = dict(os.environ, OUT="/tmp", PEER_PORT=str(server.getsockname()[1]))
    ready = os.path.join(out, ".ready")
    env["READY"] = ready
    prelude = "import os\ndef ready():\n    open(os.environ['READY'], 'w').close()\n"
    proc = subprocess.Popen([PY, "-c", prelude + code], env=env)
    peer = None
    if name.startswith("socket"):
        import threading

        rate = 2e6 if name == "socket_stream" else 0
        target = (lambda: stream_peer(server, 60, rate)) if rate else (lambda: (server.accept(), time.sleep(60)))
        peer = threading.Thread(target=target, daemon=True)
        peer.start()
    while not os.path.exists(ready):  # imports done
        time.sleep(0.1)
    os.unlink(ready)
    time.sleep(3)  # the loop in its rhythm
    t0 = time.monotonic()
    copy(tree(proc.pid), os.path.join(out, "t0"))
    time.sleep(WINDOW_S)
    t1 = time.monotonic()
    copy(tree(proc.pid), os.path.join(out, "t1"))
    for p in reversed(tree(proc.pid)):
        try:
            os.kill(p, 9)
        except OSError:
            pass
    proc.wait()
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump({"leader": proc.pid, "window_s": round(t1 - t0, 3), "expect": liveness,
                   "ticks_per_s": os.sysconf("SC_CLK_TCK")}, f, indent=1)
    print(f"{name}: {len(os.listdir(os.path.join(out, 't1')))} process(es), expect {liveness}")


if __name__ == "__main__":
    for name in sys.argv[1:] or CASES:
        record(name)
