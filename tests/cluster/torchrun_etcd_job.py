"""A Gloo job for tests/cluster/torchrun_etcd_test.sh, run by stock torchrun with --rdzv-backend etcd-v3 (or c10d).
  torchrun_etcd_job.py DIR STEPS
Every rank writes DIR/start.<attempt>.<rank> ("WORLD HOST") when its process group is up and DIR/done.<rank>
("WORLD ATTEMPT HOST") after STEPS all-reduces that each sum to the world size. Hooks (environment):
  JOB_HOLD_AT=N     after step N every rank writes DIR/held.<rank> and waits for DIR/release: the test injects
                    its fault while the job is known to be there; with JOB_HOLD_WORLD=W only in a world of W
  JOB_FAIL=R:N      in attempt 0, rank R exits 3 after step N (a worker failure)
"""
import os
import socket
import sys
import time

import torch
import torch.distributed as dist

out, steps = sys.argv[1], int(sys.argv[2])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
with open(os.path.join(out, f"start.{attempt}.{rank}"), "w") as f:
    f.write(f"{world} {socket.gethostname()}\n")
hold_at = int(os.environ.get("JOB_HOLD_AT", "-1"))
hold_world = int(os.environ.get("JOB_HOLD_WORLD", str(world)))
fail_rank, fail_step = (int(x) for x in os.environ.get("JOB_FAIL", "-1:-1").split(":"))
release = os.path.join(out, "release")
for step in range(1, steps + 1):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == world, f"step {step}: all_reduce gave {t.item()}, expected {world}"
    if attempt == 0 and rank == fail_rank and step == fail_step:
        print(f"rank {rank}: failing on purpose after step {step}", flush=True)
        sys.exit(3)
    if step == hold_at and world == hold_world:
        open(os.path.join(out, f"held.{rank}"), "w").close()
        while not os.path.exists(release):
            time.sleep(0.05)
dist.barrier()
with open(os.path.join(out, f"done.{rank}"), "w") as f:
    f.write(f"{world} {attempt} {socket.gethostname()}\n")
dist.destroy_process_group()
