"""Records what real processes wait on, as meshrun reads it (launcher/activity/wait_probe.hpp, through the dump_waits
tool) and as meshrun's hook lists their Python threads, for tests/launcher/test_wait_rule.cpp. Not run by the suite:
run it again to refresh the samples (after a build).

    .venv/bin/python tests/launcher/wait_samples/record.py BUILD_DIR [CASE ...]

Each case starts a rank as they are found in practice (torch imported, a Gloo process group of one, and a thread that
polls as meshrun's hook does, named as it is), lets it block, asks its hook-like thread for the Python threads (the
hook's own _threads(), imported from launcher/hang/python/), reads its tree with dump_waits, and writes <case>.json:
{"expect": inside|outside|unknown, "phrase": a regular expression the judgment's phrase matches, "tree": ..., "python":
[...], "peers": {"pids": [...], "endpoints": [...]}} (peers: the job's processes, as the agent would give them).
"""
import http.server
import json
import os
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HOOK_DIR = os.path.join(HERE, "..", "..", "..", "launcher", "hang", "python")
PY = sys.executable

PRELUDE = r"""
import json, os, socket, sys, threading, time
sys.path.insert(0, os.environ["HOOK_DIR"])
import _meshrun_hook as hook
import torch, torch.distributed as dist
torch.set_num_threads(2)
(torch.randn(256, 256) @ torch.randn(256, 256)).sum()  # the intra-op pool's threads exist, as in a rank
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
dist.all_reduce(torch.ones(4))  # Gloo's threads too

def _serve():  # as meshrun's hook does: a datagram socket read with a timeout of 0.1 s
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(os.environ["ASK"])
    s.settimeout(0.1)
    while True:
        try:
            path = s.recv(4096).decode()
        except socket.timeout:
            continue
        with open(path + ".tmp", "w") as f:
            json.dump(hook._threads(), f)
        os.replace(path + ".tmp", path)

threading.Thread(target=_serve, name="meshrun-hook", daemon=True).start()

def ready():
    open(os.environ["READY"], "w").close()
"""

# name: (expected place, phrase regex, code run as the rank after the prelude)
CASES = {
    "http_reply": ("outside", r"^waits on a reply from 127\.0\.0\.1:\d+ \(HTTP\) \(pid \d+ \(.*\)\)$", """
import urllib.request
ready()
urllib.request.urlopen(f"http://127.0.0.1:{os.environ['SILENT_PORT']}/score", timeout=600)  # answers in 90 s
"""),
    "sleep_poll": ("outside", r"^sleeps \(a timed wait that ends by itself\)$", """
ready()
while not os.path.exists(os.environ["FLAG"]):  # a file another process writes
    time.sleep(2)
"""),
    "lock_twice": ("inside", r"^waits on a lock, an event or a queue that nothing else in its tree can release", """
lock = threading.Lock()
lock.acquire()
ready()
lock.acquire()  # never released
"""),
    "event_unset": ("inside", r"^waits on a lock, an event or a queue that nothing else in its tree can release", """
ready()
threading.Event().wait()  # nothing sets it
"""),
    "child_http": ("outside",
                   r"^waits on its child \d+ \(.*\), which waits on a reply from 127\.0\.0\.1:\d+ \(pid \d+ \(.*\)\)$", """
import subprocess
ready()
code = "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ['SILENT_PORT'], timeout=600)"
subprocess.run([sys.executable, "-c", code])
"""),
    "child_busy": ("unknown", r"^waits on its child \d+ \(.*\), which runs$", """
import subprocess
ready()
subprocess.run([sys.executable, "-c", "while True: pass"])
"""),
    "thread_download": ("outside",
                        r"^waits on its thread 'downloader' \(\d+\), which waits on a reply from 127\.0\.0\.1:\d+ \(HTTP\)"
                        r" \(pid \d+ \(.*\)\) in download at rank_thread_download\.py:\d+$", """
import urllib.request
done = threading.Event()
def download():
    with urllib.request.urlopen(f"http://127.0.0.1:{os.environ['SLOW_PORT']}/data", timeout=600) as reply:
        while reply.read(16384):  # 16 kB/s
            pass
    done.set()
threading.Thread(target=download, name="downloader", daemon=True).start()
ready()
done.wait()
"""),
    "fifo_outside": ("outside", r"^waits on a named pipe .*/feed fed by pid \d+ \(.*\)$", """
ready()
with open(os.environ["FIFO"]) as feed:  # another process writes it, slowly
    feed.read()
"""),
    "pipe_self": ("inside", r"^waits on a pipe that only its own process can serve", """
r, w = os.pipe()
ready()
os.read(r, 1)  # nothing writes: its own write end, held by no thread that will
"""),
    "job_socket": ("inside", r"^waits on 127\.0\.0\.1:\d+ \(pid \d+ \(.*\)\), a process of the job$", """
s = socket.create_connection(("127.0.0.1", int(os.environ["JOB_PORT"])))
ready()
s.recv(1)  # another process of the job (as a rank's socket to another rank on its node)
"""),
}


class SilentHandler(socketserver.BaseRequestHandler):
    def handle(self):
        time.sleep(600)  # a slow service: no byte before it answers


class SlowHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(16384 * 600))
        self.end_headers()
        for _ in range(600):
            try:
                self.wfile.write(b"x" * 16384)
                self.wfile.flush()
            except OSError:
                return
            time.sleep(1)

    def log_message(self, *args):
        pass


def serve(handler, http_server=False):
    cls = http.server.ThreadingHTTPServer if http_server else socketserver.ThreadingTCPServer
    cls.daemon_threads = True
    server = cls(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def tree_pids(pid):
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


def record(build, name, silent_port, slow_port):
    expect, phrase, code = CASES[name]
    work = tempfile.mkdtemp()
    env = dict(os.environ, HOOK_DIR=HOOK_DIR, READY=f"{work}/ready", ASK=f"{work}/ask", FLAG=f"{work}/flag",
               FIFO=f"{work}/feed", SILENT_PORT=str(silent_port), SLOW_PORT=str(slow_port), OMP_NUM_THREADS="2")
    job_peer = None
    if name == "job_socket":
        listener = socket.create_server(("127.0.0.1", 0))
        env["JOB_PORT"] = str(listener.getsockname()[1])
        env["LISTEN_FD"] = str(listener.fileno())
        job_peer = subprocess.Popen([PY, "-c", "import os, socket, time\n"
                                     "s = socket.socket(fileno=int(os.environ['LISTEN_FD']))\n"
                                     "c, _ = s.accept()\ntime.sleep(600)"],
                                    pass_fds=[listener.fileno()], env=env)
    held = []  # the FIFO's write end, held by this process (outside the rank's tree) and never written
    if name == "fifo_outside":
        os.mkfifo(env["FIFO"])
        threading.Thread(target=lambda: held.append(open(env["FIFO"], "w")), daemon=True).start()
    script = os.path.join(work, f"rank_{name}.py")  # a file: the hook names the user's frames by their file
    with open(script, "w") as f:
        f.write(PRELUDE + code)
    rank = subprocess.Popen([PY, script], env=env)
    try:
        while not os.path.exists(env["READY"]):
            if rank.poll() is not None:
                raise SystemExit(f"{name}: the rank exited ({rank.returncode})")
            time.sleep(0.1)
        time.sleep(3)  # blocked, its children started
        ask = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        answer = f"{work}/threads.json"
        ask.sendto(answer.encode(), env["ASK"])
        while not os.path.exists(answer):
            time.sleep(0.05)
        with open(answer) as f:
            python = json.load(f)
        tree = json.loads(subprocess.run([os.path.join(build, "bin", "dump_waits"), str(rank.pid)],
                                         check=True, capture_output=True, text=True).stdout)
        pids = tree_pids(rank.pid) + ([job_peer.pid] if job_peer else [])
    finally:
        for p in reversed(tree_pids(rank.pid)):
            try:
                os.kill(p, 9)
            except OSError:
                pass
        rank.wait()
        if job_peer:
            job_peer.kill()
    sample = {"expect": expect, "phrase": phrase, "tree": tree, "python": python,
              "peers": {"pids": sorted(pids), "endpoints": []}}
    with open(os.path.join(HERE, name + ".json"), "w") as f:
        json.dump(sample, f, indent=1)
        f.write("\n")
    print(f"{name}: {len(tree['processes'])} process(es), {len(tree['processes'][0]['threads'])} threads, "
          f"expect {expect}")


if __name__ == "__main__":
    build = sys.argv[1]
    silent_port = serve(SilentHandler)
    slow_port = serve(SlowHandler, http_server=True)
    for case in sys.argv[2:] or CASES:
        record(build, case, silent_port, slow_port)
