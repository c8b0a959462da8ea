# A Gloo job for tests/cluster/etcd_test.sh that checkpoints every step and resumes from its checkpoint,
# so a lost node (and with node rank 0, the workers' store) shows as the job going on from where it was.
#   etcd_worker.py DIR STEPS   rank 0 keeps DIR/ckpt (the next step); each rank writes DIR/done.<rank>
#                              "WORLD RESTART_COUNT FIRST_STEP" when all STEPS are done
# With ETCD_WORKER_HOLD_AT=N every rank holds once step N is checkpointed (DIR/held.<rank>) until DIR/release
# exists: the test injects its fault at a known step instead of racing the job.
import os
import sys
import time

import torch
import torch.distributed as dist

out, steps = sys.argv[1], int(sys.argv[2])
dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
ckpt = os.path.join(out, "ckpt")
hold_at = int(os.environ.get("ETCD_WORKER_HOLD_AT", "-1"))
release = os.path.join(out, "release")
first = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
for step in range(first, steps):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == world, f"step {step}: all_reduce gave {t.item()}, expected {world}"
    if rank == 0:
        with open(ckpt + ".tmp", "w") as f:
            f.write(str(step + 1))
        os.replace(ckpt + ".tmp", ckpt)
        with open(os.path.join(out, "progress"), "a") as f:
            f.write(f"{step} {world} {os.environ['TORCHELASTIC_RESTART_COUNT']}\n")
    if step + 1 == hold_at and not os.path.exists(release):
        dist.barrier()  # rank 0's checkpoint of the step is written
        open(os.path.join(out, f"held.{rank}"), "w").close()
        while not os.path.exists(release):
            time.sleep(0.05)
    time.sleep(0.2)
dist.barrier()
with open(os.path.join(out, f"done.{rank}"), "w") as f:
    f.write(f"{world} {os.environ['TORCHELASTIC_RESTART_COUNT']} {first}\n")
dist.destroy_process_group()  # joins Gloo's threads before Python finalizes (pytorch#190489)
