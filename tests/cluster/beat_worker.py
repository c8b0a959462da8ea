#!/usr/bin/env python3
"""Cluster-test worker that sends progress beats (docs/progress.md), standard library only. Records its
environment in DIR/a<restart>.r<rank> like worker.sh, then beats a step every 0.1 s until DIR/finish exists
(exit 0). Once DIR/hang.<rank>.<restart> exists it stops beating and waits on an event nothing sets: a hung rank
(a deadlock: a rank that only stops beating and sleeps on is late, not hung).
    beat_worker.py DIR"""
import os
import socket
import sys
import threading
import time

d = sys.argv[1]
attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
rank = os.environ["RANK"]
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT",
        "TORCHELASTIC_RUN_ID", "MASTER_ADDR")
tmp = os.path.join(d, f".a{attempt}.r{rank}.{os.getpid()}")
with open(tmp, "w") as f:
    f.write("".join(f"{k}={os.environ[k]}\n" for k in sorted(keys) if k in os.environ))
os.rename(tmp, os.path.join(d, f"a{attempt}.r{rank}"))
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)
step = 0
for _ in range(1200):
    if os.path.exists(os.path.join(d, "finish")):
        sys.exit(0)
    if os.path.exists(os.path.join(d, f"hang.{rank}.{attempt}")):
        threading.Event().wait()
    step += 1
    try:
        sock.sendto(f"step={step} compute_s=0.1".encode(), os.environ["MESHRUN_PROGRESS"])
    except (KeyError, OSError):
        pass
    time.sleep(0.1)
sys.exit(99)
