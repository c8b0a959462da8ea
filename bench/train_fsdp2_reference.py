"""PyTorch FSDP2 reference for bench/train.sh: the same Llama-style model, shapes, batch, dtype and
optimizer as meshrun-trainer, sharded with torch.distributed.fsdp.fully_shard (one unit per block plus
the root), Gloo, launched by torchrun. Prints one JSON line per rank: median tokens/s and peak RSS."""
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
from torch.distributed.fsdp import fully_shard


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
        hd = m["dim"] // m["n_heads"]
        inv = 10000.0 ** (-torch.arange(0, hd // 2, dtype=torch.float64) / (hd // 2))
        ang = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv)
        ang = torch.cat([ang, ang], -1)
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, self.cos.to(x.dtype), self.sin.to(x.dtype))
        return self.output(self.norm(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--steps", type=int, default=30)
    a = p.parse_args()
    cfg = json.load(open(a.config))
    m, t = cfg["model"], cfg["train"]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(t.get("seed", 1234))
    seq, gb = t["seq_len"], t["global_batch_size"]
    model = Llama(m, seq)
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=t["lr"], betas=(0.9, 0.95), weight_decay=0.1)
    data_dir = cfg["data"]["path"]
    blob = b"".join(open(os.path.join(data_dir, f), "rb").read() for f in sorted(os.listdir(data_dir))
                    if os.path.isfile(os.path.join(data_dir, f)) and not f.endswith((".dat", ".u8")))
    data = torch.frombuffer(bytearray(blob), dtype=torch.uint8).long()
    g = torch.Generator().manual_seed(0)
    local = gb // world
    times = []
    for step in range(a.steps):
        starts = torch.randint(0, len(data) - seq - 1, (gb,), generator=g)[rank * local:(rank + 1) * local]
        x = torch.stack([data[s:s + seq] for s in starts])
        y = torch.stack([data[s + 1:s + seq + 1] for s in starts])
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x).float().view(-1, m["vocab_size"]), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        dist.all_reduce(loss.detach())
        times.append(time.perf_counter() - t0)
    steady = times[min(5, len(times) - 1):]
    print(json.dumps({"rank": rank, "tokens_per_s": gb * seq / statistics.median(steady),
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
