# Worker of tests/cluster/network_test.sh: records the network settings meshrun gave it in OUT/r<RANK>
# (KEY=VALUE lines); with --allreduce it first joins the Gloo group through MASTER_ADDR/MASTER_PORT (the
# store) and all-reduces rank + 1, recording SUM=; with --hold it then waits (<= 60 s) until OUT/release
# exists. Usage: net_worker.py OUT [--allreduce] [--hold]
import datetime
import os
import sys
import time

out = sys.argv[1]
keys = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
lines = [f"{k}={os.environ.get(k, '<unset>')}" for k in keys]
if "--allreduce" in sys.argv[2:]:
    import torch
    import torch.distributed as dist

    # Bounded: a Gloo pair that cannot connect fails the test in seconds, not after PyTorch's 30 min.
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=20))
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    lines.append(f"SUM={t.item():.0f}")
    dist.destroy_process_group()
rank = os.environ["RANK"]
with open(os.path.join(out, f".r{rank}"), "w") as f:
    f.write("\n".join(lines) + "\n")
os.replace(os.path.join(out, f".r{rank}"), os.path.join(out, f"r{rank}"))
print(f"rank {rank}: " + " ".join(lines), flush=True)
if "--hold" in sys.argv[2:]:
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(out, "release")) and time.monotonic() < deadline:
        time.sleep(0.05)
