"""PyTorch DCP reference for bench/trainer/checkpoint.sh and bench/trainer/checkpoint_async.sh: the same Llama-style model as
meshrun-trainer (from train_fsdp2_reference.py), sharded with FSDP2 fully_shard, Gloo, torchrun; AdamW state
materialised by one step.

Default: torch.distributed.checkpoint.save / load of model + optimizer state (FileSystemWriter fsyncs its
files, as meshrun does). Prints one JSON line on rank 0: median save and load seconds and the bytes on disk.

--train-steps N --every K (for checkpoint_async.sh): trains N steps three times, saving every K steps
  none   no checkpoints (the baseline loop time)
  sync   dcp.save
  async  dcp.async_save (a thread writes while training goes on; the state is staged into CPU memory first,
         which is what the call blocks on), on a Gloo group of its own, as torchtitan does: the writer's
         collectives must not interleave with training's on the default group; the next save first waits
         for the previous one (at most one in flight), and the loop waits for the last one
(--loop-reps times) and prints one JSON line per loop on rank 0: the loop's seconds and the seconds training was blocked at each
save (get_state_dict + the save call + any wait for the previous save)."""
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


def train_with_saves(a, model, opt, train_step, rank):
    ckpt_group = dist.new_group(backend="gloo")
    for mode in ("none", "sync", "async") * a.loop_reps:
        blocked, pending = [], None
        dist.barrier()
        t0 = time.perf_counter()
        for step in range(1, a.train_steps + 1):
            train_step()
            if mode == "none" or step % a.every != 0:
                continue
            path = os.path.join(a.dir, f"dcp_{mode}_{step}")
            b0 = time.perf_counter()
            if pending is not None:
                pending.result()
            model_sd, optim_sd = get_state_dict(model, opt)
            state = {"model": model_sd, "optim": optim_sd}
            if mode == "sync":
                dcp.save(state, checkpoint_id=path)
            else:
                pending = dcp.async_save(state, checkpoint_id=path, process_group=ckpt_group)
            blocked.append(time.perf_counter() - b0)
        if pending is not None:
            pending.result()
        dist.barrier()
        loop_s = time.perf_counter() - t0
        if rank == 0:
            print(json.dumps({"mode": mode, "loop_s": loop_s, "blocked_s": blocked}), flush=True)
            for d in os.listdir(a.dir):
                if d.startswith(f"dcp_{mode}_"):
                    shutil.rmtree(os.path.join(a.dir, d), ignore_errors=True)
        dist.barrier()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--train-steps", type=int, default=0, help="time saves inside a training loop of this many steps")
    p.add_argument("--every", type=int, default=3, help="with --train-steps: save every this many steps")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--global-batch-size", type=int, default=2)
    p.add_argument("--loop-reps", type=int, default=1, help="with --train-steps: run the three loops this many times")
    a = p.parse_args()
    cfg = json.load(open(a.config))
    m, t = cfg["model"], cfg["train"]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1234)
    seq = a.seq_len
    model = Llama(m, seq)
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    x = torch.randint(0, m["vocab_size"], (max(1, a.global_batch_size // dist.get_world_size()), seq))

    def train_step():
        F.cross_entropy(model(x).view(-1, m["vocab_size"]), x.view(-1)).backward()
        opt.step()
        opt.zero_grad()

    train_step()
    if a.train_steps > 0:
        train_with_saves(a, model, opt, train_step, rank)
        dist.destroy_process_group()
        return

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
