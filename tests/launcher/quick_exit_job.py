# Two ranks; rank 0 leaves, at its end, what Python's exit steps must finish (docs/multi-node.md#quick-exit): a
# text file and a gzip file written and never closed (with --zip also a ZipFile, whose directory only its __del__
# writes), a non-daemon thread still working, an atexit function and a C library's atexit handler; and probes
# of how it ended (tests/launcher/c_atexit_marker.c: "teardown" when Python's own teardown ran to its end).
# quick_exit_test.sh reads what each attempt left in OUT_DIR (files named <what>_<attempt>).
# --ends lists rank 0's end in each attempt:
#   lost_peer   rank 1 closes its process group: rank 0's next all_reduce fails (the collective's error)
#   raise       rank 0 raises an exception of its own
#   sys_exit_3  rank 0 calls sys.exit(3)
# Rank 1 then waits until its agent stops it. With --hold an attempt that is not the last first waits until its
# agent's standbys are up (both ranks'), so that the next attempt starts from them.
#   quick_exit_job.py OUT_DIR --ends lost_peer,raise [--hold] [--zip]
import argparse
import atexit
import ctypes
import gzip
import os
import sys
import threading
import time
import zipfile

import torch
import torch.distributed as dist
from standby_probe import standby_is_up

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--ends", required=True)
parser.add_argument("--hold", action="store_true")
parser.add_argument("--zip", action="store_true")
options = parser.parse_args()
ends = options.ends.split(",")
end = ends[attempt]


def path(what):
    return os.path.join(options.out, f"{what}_{attempt}")


# A process group and a few collectives: the job's first step (its agent starts the standbys then), and the
# teardown that costs a failed worker most.
dist.init_process_group("gloo")
rank = dist.get_rank()
for _ in range(3):
    dist.all_reduce(torch.ones(1))
if options.hold and attempt < len(ends) - 1:
    while not standby_is_up(count=2):
        time.sleep(0.05)
dist.barrier()
if rank == 1:
    if end == "lost_peer":
        dist.destroy_process_group()
    while True:
        time.sleep(1)

text = open(path("text"), "w")
text.write(f"text of attempt {attempt}")
zipped = gzip.open(path("gzip") + ".gz", "wt")
zipped.write(f"zipped by attempt {attempt}")
if options.zip:
    archive = zipfile.ZipFile(path("zip") + ".zip", "w")
    archive.writestr("entry.txt", f"archived by attempt {attempt}")
probes = ctypes.CDLL(os.environ["MESHRUN_TEST_C_ATEXIT"])
probes.c_atexit_marker_arm(path("c_atexit").encode())
probes.c_teardown_marker_set(path("teardown").encode())
ctypes.pythonapi.Py_AtExit(ctypes.cast(probes.c_teardown_marker_write, ctypes.c_void_p))
atexit.register(lambda: open(path("atexit"), "w").close())


def late_writer():
    time.sleep(0.5)
    with open(path("thread"), "w") as f:
        f.write("joined")


threading.Thread(target=late_writer, name="late-writer").start()
print(f"attempt {attempt}: ending with {end}", flush=True)
if end == "sys_exit_3":
    sys.exit(3)
if end == "raise":
    raise RuntimeError(f"quick exit job, attempt {attempt}")
dist.all_reduce(torch.ones(1))  # lost_peer: rank 1 closed its process group
raise AssertionError("the all_reduce with a closed peer succeeded")
