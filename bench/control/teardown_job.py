# How most scripts end, for bench/control/teardown.sh: a few all_reduces, then destroy_process_group() right after
# the last one, and a normal interpreter exit. VARIANT: "plain" (the default group only), "mesh" (a 1-D
# DeviceMesh over the world first, as FSDP2 scripts have) or "nodestroy" (plain, without the destroy).
import sys

import torch
import torch.distributed as dist

variant = sys.argv[1] if len(sys.argv) > 1 else "plain"
dist.init_process_group("gloo")
if variant == "mesh":
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
t = torch.ones(1024)
for _ in range(5):
    dist.all_reduce(t)
if variant != "nodestroy":
    dist.destroy_process_group()
