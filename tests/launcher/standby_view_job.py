# What a worker sees of its interpreter, written as JSON per attempt (standby_test.sh compares a standby's view
# with a fresh interpreter's). Attempt 0 always runs fresh: it writes its view, then (with --hold) waits until its
# agent's standby for this rank is up (its agent starts it at the job's first step: a few collectives here), and
# kills itself with SIGKILL, so attempt 1 is started from that standby.
# Attempt 1 writes its view and ends as --end says: ok, sys_exit_7, os_exit_9, raise.
#   standby_view_job.py OUT_DIR --end MODE [--hold]
import argparse
import atexit
import json
import os
import signal
import sys
import time

import __main__

import torch
import torch.distributed as dist
from standby_probe import standby_is_up

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
# A few collectives: the job's first step, from which its agent starts the standbys.
dist.init_process_group("gloo")
for _ in range(3):
    dist.all_reduce(torch.ones(1))
parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--end", default="ok")
parser.add_argument("--hold", action="store_true")
options = parser.parse_args()


def handler_name(h):
    if h is None:
        return "None"
    if h in (signal.SIG_DFL, signal.SIG_IGN):
        return signal.Handlers(h).name
    return getattr(h, "__qualname__", repr(h))


def stream_view(stream):
    return {
        "fileno": stream.fileno(),
        "encoding": stream.encoding,
        "line_buffering": stream.line_buffering,
        "write_through": getattr(stream, "write_through", None),
        "isatty": stream.isatty(),
    }


main_keys = sorted(k for k in vars(__main__) if not k.startswith("_") or k.startswith("__"))
view = {
    "argv": sys.argv,
    "orig_argv": sys.orig_argv,
    "file": __file__,
    "name": __name__,
    "main_keys": [k for k in main_keys if k.startswith("__")],
    "main_spec": repr(__main__.__spec__),
    "main_package": repr(__main__.__package__),
    "main_cached": repr(getattr(__main__, "__cached__", "absent")),
    "main_loader": type(getattr(__main__, "__loader__", None)).__name__,
    "builtins": type(__builtins__).__name__,
    "path": sys.path,
    "cwd": os.getcwd(),
    "environ": dict(os.environ),
    "flags": list(sys.flags),
    "executable": sys.executable,
    "signals": {s.name: handler_name(signal.getsignal(s)) for s in signal.valid_signals() if isinstance(s, signal.Signals)},
    "sigmask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "excepthook_default": sys.excepthook is sys.__excepthook__,
    "imported": {m: m in sys.modules for m in ("argparse", "atexit", "json", "torch", "__main__")},
    "stdin": os.path.realpath(f"/proc/self/fd/0").startswith("/dev/null") if not sys.stdin.isatty() else "tty",
    "stdout": stream_view(sys.stdout),
    "stderr": stream_view(sys.stderr),
    "own_process_group": os.getpgrp() == os.getpid(),
    "umask": os.umask(os.umask(0)),
    "threads": sorted(t.name for t in __import__("threading").enumerate() if t.name != "meshrun-hook"),
}
with open(os.path.join(options.out, f"view_{attempt}.json"), "w") as f:
    json.dump(view, f, indent=1, sort_keys=True)

# atexit runs at a normal end, sys.exit and an uncaught exception; never at os._exit.
atexit.register(lambda: open(os.path.join(options.out, f"atexit_{attempt}"), "w").close())


def fail_here():
    raise RuntimeError("the script's own failure")


if attempt == 0:
    print("attempt 0: fresh interpreter", flush=True)
    while options.hold and not standby_is_up():
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGKILL)

print(f"attempt {attempt}: ending with {options.end}", flush=True)
if options.end == "sys_exit_7":
    sys.exit(7)
if options.end == "os_exit_9":
    os._exit(9)
if options.end == "raise":
    fail_here()
