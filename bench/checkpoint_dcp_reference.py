"""PyTorch DCP reference for bench/checkpoint.sh: the same Llama-style model as meshrun-trainer (from
train_fsdp2_reference.py), sharded with FSDP2 fully_shard, Gloo, torchrun; AdamW state materialised by one
step; then torch.distributed.checkpoint.save / load of model + optimizer state (FileSystemWriter fsyncs
its files, as meshrun does). Prints one JSON line on rank 0: median save and load seconds and the bytes
on disk."""
import argparse
import json
import os
import shutil
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_fsdp2_reference import Llama  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--reps", type=int, default=3)
    a = p.parse_args()
    cfg = json.load(open(a.config))
    m, t = cfg["model"], cfg["train"]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1234)
    seq = 32
    model = Llama(m, seq)
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    x = torch.randint(0, m["vocab_size"], (2, seq))
    F.cross_entropy(model(x).view(-1, m["vocab_size"]), x.view(-1)).backward()
    opt.step()
    opt.zero_grad()

    saves, loads = [], []
    for i in range(a.reps):
        path = os.path.join(a.dir, f"dcp_{i}")
        model_sd, optim_sd = get_state_dict(model, opt)
        dist.barrier()
        t0 = time.perf_counter()
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)
        dist.barrier()
        saves.append(time.perf_counter() - t0)
    nbytes = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(os.path.join(a.dir, "dcp_0")) for f in fs)
    for i in range(a.reps):
        path = os.path.join(a.dir, f"dcp_{i}")
        model_sd, optim_sd = get_state_dict(model, opt)
        dist.barrier()
        t0 = time.perf_counter()
        state = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, checkpoint_id=path)
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        dist.barrier()
        loads.append(time.perf_counter() - t0)
    if rank == 0:
        print(json.dumps({"save_s": statistics.median(saves), "load_s": statistics.median(loads), "bytes": nbytes}), flush=True)
        for i in range(a.reps):
            shutil.rmtree(os.path.join(a.dir, f"dcp_{i}"), ignore_errors=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
