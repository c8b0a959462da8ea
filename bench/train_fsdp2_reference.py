"""PyTorch FSDP2 reference for bench/train.sh and scripts/gpu_kit.sh: the same Llama-style model, shapes,
batch, dtype and optimizer as meshrun-trainer, sharded with torch.distributed.fsdp.fully_shard (one unit
per block plus the root), launched by torchrun (or meshrun). CPU: Gloo, fp32. CUDA (--device cuda): NCCL,
MixedPrecisionPolicy with the config's fsdp.param_dtype for compute and fp32 for gradient reduction, and
fused AdamW, as meshrun-trainer runs there. Prints one JSON line per rank: median tokens/s, peak RSS and,
on CUDA, the caching allocator's peak."""
import argparse
import json
import math
import os
import resource
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
          "fp16": torch.float16, "float16": torch.float16}


class Block(nn.Module):
    def __init__(self, m):
        super().__init__()
        d, hd = m["dim"], m["dim"] // m["n_heads"]
        kv = m.get("n_kv_heads") or m["n_heads"]
        f = m.get("ffn_hidden") or ((8 * d // 3 + 31) // 32 * 32)
        self.h, self.kv, self.hd = m["n_heads"], kv, hd
        self.attention_norm = nn.RMSNorm(d, eps=1e-5)
        self.wq = nn.Linear(d, d, bias=False)
        self.wk = nn.Linear(d, kv * hd, bias=False)
        self.wv = nn.Linear(d, kv * hd, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        self.ffn_norm = nn.RMSNorm(d, eps=1e-5)
        self.w1 = nn.Linear(d, f, bias=False)
        self.w3 = nn.Linear(d, f, bias=False)
        self.w2 = nn.Linear(f, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        h = self.attention_norm(x)
        q = self.wq(h).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.wk(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.wv(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        rot = lambda z: torch.cat([-z[..., self.hd // 2:], z[..., : self.hd // 2]], -1)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv != self.h)
        x = x + self.wo(a.transpose(1, 2).reshape(b, t, d))
        g = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(g)) * self.w3(g))


class Llama(nn.Module):
    def __init__(self, m, seq_len):
        super().__init__()
        self.tok_embeddings = nn.Embedding(m["vocab_size"], m["dim"])
        self.layers = nn.ModuleList(Block(m) for _ in range(m["n_layers"]))
        self.norm = nn.RMSNorm(m["dim"], eps=1e-5)
        self.output = nn.Linear(m["dim"], m["vocab_size"], bias=False)
        self.output.weight = self.tok_embeddings.weight  # tied, as the meshrun configs
        for p in self.parameters():  # meshrun-trainer's init_std: nn.Embedding's N(0, 1) would start at loss ~100
            if p.dim() == 2:
                nn.init.normal_(p, std=m.get("init_std", 0.02))
        hd = m["dim"] // m["n_heads"]
        inv = m.get("rope_theta", 10000.0) ** (-torch.arange(0, hd // 2, dtype=torch.float64) / (hd // 2))
        ang = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv)
        ang = torch.cat([ang, ang], -1)
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, self.cos.to(x.dtype), self.sin.to(x.dtype))
        return self.output(self.norm(x))


def load_tokens(data_cfg, path_override):
    """The corpus as a 1-D int64 tensor: a folder of text files (bytes are tokens) or a uint16/uint32 file."""
    path = path_override or data_cfg["path"]
    fmt = data_cfg.get("format", "text")
    if fmt in ("bin_u16", "bin_u32"):
        import numpy as np
        return torch.from_numpy(np.fromfile(path, dtype=np.uint16 if fmt == "bin_u16" else np.uint32).astype(np.int64))
    blob = b"".join(open(os.path.join(path, f), "rb").read() for f in sorted(os.listdir(path))
                    if os.path.isfile(os.path.join(path, f)) and not f.endswith((".dat", ".u8")))
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8).long()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--data", default="", help="token file or text folder instead of the config's data.path")
    p.add_argument("--global-batch-size", type=int, default=0, help="instead of the config's train.global_batch_size")
    p.add_argument("--activation-checkpointing", action="store_true", help="recompute every block in backward")
    p.add_argument("--cpu-offload", action="store_true", help="FSDP2 CPUOffloadPolicy (CUDA)")
    p.add_argument("--profile", action="store_true", help="print where GPU time goes over 3 steady steps")
    a = p.parse_args()
    cfg = json.load(open(a.config))
    m, t = cfg["model"], cfg["train"]
    cuda = a.device == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(t.get("seed", 1234))
    seq, gb = t["seq_len"], a.global_batch_size or t["global_batch_size"]
    device = torch.device("cuda") if cuda else torch.device("cpu")
    with device:
        model = Llama(m, seq)
    shard_args = {}
    if cuda:
        param_dtype = DTYPES[cfg.get("fsdp", {}).get("param_dtype", "fp32")]
        shard_args["mp_policy"] = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    if a.cpu_offload:
        from torch.distributed.fsdp import CPUOffloadPolicy
        shard_args["offload_policy"] = CPUOffloadPolicy()
    if a.activation_checkpointing:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
        model.layers = nn.ModuleList(checkpoint_wrapper(layer) for layer in model.layers)
    for layer in model.layers:
        fully_shard(layer, **shard_args)
    fully_shard(model, **shard_args)
    opt = torch.optim.AdamW(model.parameters(), lr=t["lr"], betas=(0.9, 0.95), weight_decay=0.1,
                            fused=cuda and not a.cpu_offload)
    # The trainer's linear warm-up (its cosine decay changes nothing over a benchmark's few steps).
    warmup = max(1, t.get("warmup_steps", 0))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / warmup))
    data = load_tokens(cfg["data"], a.data)
    g = torch.Generator().manual_seed(0)
    local = gb // world
    times = []
    profiler = None
    for step in range(a.steps):
        if a.profile and step == a.steps - 3:
            profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
            profiler.__enter__()
        starts = torch.randint(0, len(data) - seq - 1, (gb,), generator=g)[rank * local:(rank + 1) * local]
        x = torch.stack([data[s:s + seq] for s in starts]).to(device)
        y = torch.stack([data[s + 1:s + seq + 1] for s in starts]).to(device)
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x).float().view(-1, m["vocab_size"]), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        dist.all_reduce(loss.detach())
        loss.item()  # CUDA: the step is done when the host has its loss
        times.append(time.perf_counter() - t0)
    if profiler is not None:
        profiler.__exit__(None, None, None)
        print(profiler.key_averages().table(sort_by="cuda_time_total", row_limit=25), flush=True)
    steady = times[min(5, len(times) - 1):]
    result = {"rank": rank, "tokens_per_s": gb * seq / statistics.median(steady), "final_loss": loss.item(),
              "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if cuda:
        result["device_peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
    print(json.dumps(result), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
