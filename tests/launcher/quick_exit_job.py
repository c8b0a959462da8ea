# A worker that leaves, at its end, what Python's exit steps must finish (docs/multi-node.md#quick-exit):
# a text file and a gzip file written and never closed, a non-daemon thread still working, an atexit function,
# and an object whose __del__ only the interpreter's teardown runs. quick_exit_test.sh reads what each attempt
# left in OUT_DIR (files named <what>_<attempt>).
# --ends lists each attempt's end (raise, sys_exit_3); with --hold an attempt that is not the last first waits
# until its agent's standby is up, so that the next attempt starts from it.
#   quick_exit_job.py OUT_DIR --ends raise,raise [--hold]
import argparse
import atexit
import gzip
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
from standby_probe import standby_is_up

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--ends", required=True)
parser.add_argument("--hold", action="store_true")
options = parser.parse_args()
ends = options.ends.split(",")


def path(what):
    return os.path.join(options.out, f"{what}_{attempt}")


class TornDown:
    """Writes its file when the interpreter frees it: in the teardown, for a module global."""

    def __init__(self, file):
        self.file, self.write, self.open, self.flags = file, os.write, os.open, os.O_WRONLY | os.O_CREAT

    def __del__(self):
        self.write(self.open(self.file, self.flags, 0o644), b"torn down")


# A process group and a few collectives: the job's first step (its agent starts the standbys then), and the
# teardown that costs a failed worker most.
dist.init_process_group("gloo")
for _ in range(3):
    dist.all_reduce(torch.ones(1))
text = open(path("text"), "w")
text.write(f"text of attempt {attempt}")
zipped = gzip.open(path("zip") + ".gz", "wt")
zipped.write(f"zipped by attempt {attempt}")
torn_down = TornDown(path("teardown"))
atexit.register(lambda: open(path("atexit"), "w").close())


def late_writer():
    time.sleep(0.5)
    with open(path("thread"), "w") as f:
        f.write("joined")


threading.Thread(target=late_writer, name="late-writer").start()
if options.hold and attempt < len(ends) - 1:
    while not standby_is_up():
        time.sleep(0.05)
print(f"attempt {attempt}: ending with {ends[attempt]}", flush=True)
if ends[attempt] == "sys_exit_3":
    sys.exit(3)
raise RuntimeError(f"quick exit job, attempt {attempt}")
