"""PyTorch reference for bench/trainer/train.sh, bench/trainer/strategies.sh, bench/trainer/memory.sh and scripts/gpu_kit.sh: the
same Llama-style model, shapes, batches, dtype, optimizer and timed window as meshrun-trainer, parallelized
the way PyTorch users do it, launched by torchrun (or meshrun).

Strategies (--strategy, else the config's fsdp.strategy), each the FSDP2 equivalent of meshrun's:
  FULL_SHARD          fully_shard(reshard_after_forward=True), one unit per block plus the root
  SHARD_GRAD_OP       fully_shard(reshard_after_forward=False)
  NO_SHARD            DistributedDataParallel (gradient_as_bucket_view)
  HYBRID_SHARD        fully_shard over a 2-D DeviceMesh (replicate x shard), reshard_after_forward=True
  HYBRID_SHARD_ZERO2  the same with reshard_after_forward=False
The sharded strategies build the model on the meta device and materialize only each rank's shards
(torchtitan's way), so no rank ever holds the whole model.

What matches meshrun-trainer (trainer/):
  - batches: the same windows of the same token data (dataset.cpp's splitmix64 sampler, training split
    only), built from the corpus as stored (uint8 bytes for text, memory-mapped token files), not from an
    int64 copy of it;
  - AdamW with the config's betas, eps and weight decay on matrices only (2-D parameters; RMSNorm gains
    get none), the fused kernel, the same warm-up + cosine learning rate, the same gradient clipping;
  - the timed window of a step: building the micro-batch(es), forward, backward, gradient reduction,
    clip, optimizer step, and the all-reduce of the loss the host then reads;
  - memory: start_rss_bytes is the RSS just before the model is built (data already opened), as
    rank<R>.json's start_rss_bytes; peak_rss_bytes is getrusage's lifetime peak.
CPU: Gloo. CUDA (--device cuda): NCCL. Either: fsdp.param_dtype for compute and fsdp.reduce_dtype for
reduction, through a MixedPrecisionPolicy when either is not fp32 (both default to fp32). Prints one JSON
line per rank:
  {"rank", "strategy", "world_size", "tokens_per_step", "tokens_per_s" (median, first 5 steps skipped),
   "final_loss", "start_rss_bytes", "peak_rss_bytes", "step_times_s" and "losses" (every step; rounded, and
   "losses_exact" unrounded), "device_peak_allocated_bytes" (CUDA)}
For step-by-step parity (tests/trainer/pytorch_parity_test.py): --init-from starts from meshrun-trainer's
exported initial weights, --save-final writes the trained ones in the same names.
"""
import argparse
import contextlib
import fnmatch
import glob
import json
import math
import os
import resource
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
          "fp16": torch.float16, "float16": torch.float16}
STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
LLMC_MAGIC, LLMC_HEADER_INTS = 20240520, 256
MASK64 = (1 << 64) - 1


# --- config ------------------------------------------------------------------------------------------------

def load_config(path, sets):
    """The config file with `--set key.sub=value` overrides applied, as meshrun-trainer's --set: the value is
    JSON when it parses as JSON, else a bare string."""
    cfg = json.load(open(path))
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"--set {item!r}: expected key=value")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        node = cfg
        *parents, leaf = key.split(".")
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = value
    return cfg


def ffn_dim(m):
    """model.ffn_hidden, else 8/3 * dim rounded up to ffn_multiple_of (ModelConfig::ffn_dim)."""
    if m.get("ffn_hidden"):
        return m["ffn_hidden"]
    mult = m.get("ffn_multiple_of", 32)
    return (8 * m["dim"] // 3 + mult - 1) // mult * mult


def learning_rate(t, steps, step):
    """trainer/fsdp/adamw.cpp's learning_rate(): linear warm-up, then cosine down to min_lr; step is 1-based."""
    lr, warmup = t.get("lr", 3e-3), t.get("warmup_steps", 10)
    if warmup > 0 and step <= warmup:
        return lr * step / warmup
    min_lr = t.get("min_lr", 3e-4)
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


# --- data: trainer/data/dataset.cpp and token_files.cpp ----------------------------------------------------

def resolve_data_files(path, exclude):
    """A file, a directory (its regular files) or a glob, in name order, minus the exclude patterns."""
    if os.path.isdir(path):
        files = [os.path.join(path, f) for f in sorted(os.listdir(path)) if os.path.isfile(os.path.join(path, f))]
    elif any(c in path for c in "*?["):
        files = sorted(f for f in glob.glob(path) if os.path.isfile(f))
    else:
        files = [path]
    files = [f for f in files if not any(fnmatch.fnmatch(os.path.basename(f), p) for p in exclude)]
    if not files:
        raise ValueError(f"data.path {path!r} names no files")
    return files


def open_token_file(path, fmt):
    """A token file as a read-only memory map (no copy): llm.c shards (header + uint16/uint32), flat uint16/uint32."""
    head = np.fromfile(path, dtype=np.int32, count=LLMC_HEADER_INTS)
    if fmt == "llmc" or (fmt == "bin" and len(head) > 0 and head[0] == LLMC_MAGIC):
        if head[0] != LLMC_MAGIC or head[1] not in (1, 2):
            raise ValueError(f"{path!r} is not an llm.c token shard (magic {head[0]}, version {head[1]})")
        dtype = np.uint16 if head[1] == 1 else np.uint32
        return np.memmap(path, dtype=dtype, mode="r", offset=LLMC_HEADER_INTS * 4, shape=(int(head[2]),))
    return np.memmap(path, dtype=np.uint32 if fmt == "bin_u32" else np.uint16, mode="r")


class TokenData:
    """The corpus as stored: text files as one uint8 array (bytes are tokens, as the trainer's byte vector),
    token files memory-mapped. Training windows lie in the first train_size tokens."""

    def __init__(self, d, path_override=""):
        files = resolve_data_files(path_override or d["path"], d.get("exclude", []))
        fmt = d.get("format", "text")
        if fmt == "text":
            self.parts = [np.frombuffer(b"".join(open(f, "rb").read() for f in files), dtype=np.uint8)]
        else:
            self.parts = [open_token_file(f, fmt) for f in files]
        self.starts = np.cumsum([0] + [len(p) for p in self.parts])
        self.size = int(self.starts[-1])
        # data.val_path holds the validation tokens elsewhere; otherwise the last val_fraction is held out.
        self.train_size = self.size if d.get("val_path") else self.size - int(self.size * d.get("val_fraction", 0.05))

    def window(self, start, n):
        """Tokens [start, start + n) as int64, across file boundaries."""
        out, k = [], int(np.searchsorted(self.starts, start, side="right")) - 1
        while n > 0:
            lo = start - int(self.starts[k])
            piece = self.parts[k][lo:lo + n]
            out.append(piece)
            start, n, k = start + len(piece), n - len(piece), k + 1
        return np.concatenate(out).astype(np.int64) if len(out) > 1 else out[0].astype(np.int64)


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def sample_micro_batch(data, seed, step_index, first_seq, global_batch, seq_len, rank, world):
    """dataset.cpp's sample_micro_batch for the training split: this rank's (inputs, targets), int64."""
    local = global_batch // world
    span = data.train_size - seq_len - 1
    stream = splitmix64(seed ^ 0x7261696E)
    rows = []
    for i in range(local):
        seq = first_seq + rank * local + i
        h = splitmix64(stream ^ splitmix64((step_index * 1000003 + seq) & MASK64))
        rows.append(data.window(h % (span + 1), seq_len + 1))
    both = torch.from_numpy(np.stack(rows))
    return both[:, :-1], both[:, 1:]


# --- weights in Hugging Face names (meshrun-trainer's `export`, and its model.init_from) ----------------------

HF_LAYER_NAMES = {"input_layernorm": "attention_norm", "self_attn.q_proj": "wq", "self_attn.k_proj": "wk",
                  "self_attn.v_proj": "wv", "self_attn.o_proj": "wo", "post_attention_layernorm": "ffn_norm",
                  "mlp.gate_proj": "w1", "mlp.up_proj": "w3", "mlp.down_proj": "w2"}
HF_ROOT_NAMES = {"model.embed_tokens.weight": "tok_embeddings.weight", "model.norm.weight": "norm.weight",
                 "lm_head.weight": "output.weight"}


def module_name(hf_name):
    """model.layers.3.self_attn.q_proj.weight -> layers.3.wq.weight (ValueError for a name we do not model)."""
    if hf_name in HF_ROOT_NAMES:
        return HF_ROOT_NAMES[hf_name]
    parts = hf_name.split(".")
    if parts[:2] == ["model", "layers"] and parts[-1] == "weight":
        inner = ".".join(parts[3:-1])
        if inner in HF_LAYER_NAMES:
            return f"layers.{parts[2]}.{HF_LAYER_NAMES[inner]}.weight"
    raise ValueError(f"{hf_name}: not a tensor of this model")


def load_hf_weights(model, path, tied):
    """The full weights of a .safetensors file into the (possibly sharded) model; every rank reads the file."""
    from safetensors.torch import load_file
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    full = {module_name(k): v.float() for k, v in load_file(path).items()}
    if tied:
        full["output.weight"] = full["tok_embeddings.weight"]
    target = model.module if isinstance(model, DistributedDataParallel) else model
    set_model_state_dict(target, full, options=StateDictOptions(full_state_dict=True, strict=True))


def save_hf_weights(model, path, tied):
    """The trained weights gathered to rank 0 and written with Hugging Face names (as `export` writes them)."""
    from safetensors.torch import save_file
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    target = model.module if isinstance(model, DistributedDataParallel) else model
    full = get_model_state_dict(target, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() != 0:
        return
    names = {v: k for k, v in HF_ROOT_NAMES.items()}
    out = {}
    for name, tensor in full.items():
        if name == "output.weight" and tied:
            continue
        if name in names:
            out[names[name]] = tensor.contiguous()
            continue
        _, index, short, _ = name.split(".")
        hf = next(k for k, v in HF_LAYER_NAMES.items() if v == short)
        out[f"model.layers.{index}.{hf}.weight"] = tensor.contiguous()
    save_file(out, path)


# --- model ---------------------------------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, m):
        super().__init__()
        d, hd = m["dim"], m["dim"] // m["n_heads"]
        kv = m.get("n_kv_heads") or m["n_heads"]
        f, eps = ffn_dim(m), m.get("norm_eps", 1e-5)
        self.h, self.kv, self.hd = m["n_heads"], kv, hd
        self.attention_norm = nn.RMSNorm(d, eps=eps)
        self.wq = nn.Linear(d, d, bias=False)
        self.wk = nn.Linear(d, kv * hd, bias=False)
        self.wv = nn.Linear(d, kv * hd, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        self.ffn_norm = nn.RMSNorm(d, eps=eps)
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
        self.m, self.seq_len = m, seq_len
        self.tok_embeddings = nn.Embedding(m["vocab_size"], m["dim"])
        self.layers = nn.ModuleList(Block(m) for _ in range(m["n_layers"]))
        self.norm = nn.RMSNorm(m["dim"], eps=m.get("norm_eps", 1e-5))
        self.output = nn.Linear(m["dim"], m["vocab_size"], bias=False)
        if m.get("tie_embeddings", True):
            self.output.weight = self.tok_embeddings.weight
        hd = m["dim"] // m["n_heads"]
        self.register_buffer("cos", torch.empty(seq_len, hd), persistent=False)
        self.register_buffer("sin", torch.empty(seq_len, hd), persistent=False)

    @torch.no_grad()
    def init_weights(self, seed, buffer_device):
        """meshrun's init (model.cpp): matrices N(0, init_std), the blocks' output projections (wo, w2) scaled
        by 1/sqrt(2 n_layers), gains 1. Works on whole tensors and on FSDP2's DTensor shards alike: each
        local piece draws from a generator keyed by (seed, parameter, shard coordinate), so replicas (DDP,
        HSDP's replicate axis) hold identical values. The rotary tables go to buffer_device, where the
        blocks compute (with CPU offload the parameters live on the host, the computation on the GPU)."""
        std = self.m.get("init_std", 0.02)
        scaled = std / math.sqrt(2 * self.m["n_layers"])
        for index, (name, p) in enumerate(self.named_parameters()):
            local, coord = p, []
            if isinstance(p, DTensor):
                local = p.to_local()
                coord = [c for c, pl in zip(p.device_mesh.get_coordinate(), p.placements) if pl.is_shard()]
            if p.dim() == 1:
                local.fill_(1.0)
                continue
            key = seed * 1000003 + index * 1009 + sum(c * 7919 ** i for i, c in enumerate(coord))
            gen = torch.Generator(device=local.device).manual_seed(key & (MASK64 >> 1))
            local.normal_(0.0, scaled if name.endswith(("wo.weight", "w2.weight")) else std, generator=gen)
        hd = self.m["dim"] // self.m["n_heads"]
        inv = self.m.get("rope_theta", 10000.0) ** (-torch.arange(0, hd // 2, dtype=torch.float64) / (hd // 2))
        ang = torch.outer(torch.arange(self.seq_len, dtype=torch.float64), inv)
        ang = torch.cat([ang, ang], -1)
        self.cos = ang.cos().float().to(buffer_device)
        self.sin = ang.sin().float().to(buffer_device)

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, self.cos.to(x.dtype), self.sin.to(x.dtype))
        return self.output(self.norm(x))


# --- parallelism -------------------------------------------------------------------------------------------

def resolve_mesh(strategy, device_type, world, shard_group_size):
    """A 1-D mesh for FULL_SHARD / SHARD_GRAD_OP; (replicate, shard) for HYBRID_*; None for DDP."""
    if strategy == "NO_SHARD":
        return None
    if not strategy.startswith("HYBRID"):
        return init_device_mesh(device_type, (world,), mesh_dim_names=("shard",))
    size = shard_group_size or int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if size <= 0 or world % size != 0:
        raise ValueError(f"fsdp.shard_group_size ({size}) must divide the world size ({world})")
    return init_device_mesh(device_type, (world // size, size), mesh_dim_names=("replicate", "shard"))


def build_model(m, seq, strategy, mesh, device, seed, ac_every, shard_args):
    """The model with the strategy applied, weights initialized on `device` (CPU offload: on the host)."""
    sharded = strategy != "NO_SHARD"
    with torch.device("meta" if sharded else device):
        model = Llama(m, seq)
    if ac_every > 0:  # blocks 0, k, 2k, ... recompute in backward, as the trainer's activation_checkpointing=k
        model.layers = nn.ModuleList(checkpoint_wrapper(layer) if i % ac_every == 0 else layer
                                     for i, layer in enumerate(model.layers))
    if not sharded:
        model.init_weights(seed, device)
        return DistributedDataParallel(model, gradient_as_bucket_view=True)
    reshard = strategy in ("FULL_SHARD", "HYBRID_SHARD")
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard, **shard_args)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard, **shard_args)
    model.to_empty(device="cpu" if "offload_policy" in shard_args else device)
    assert not m.get("tie_embeddings", True) or model.output.weight is model.tok_embeddings.weight
    model.init_weights(seed, device)
    return model


def build_optimizer(params, t, impl):
    """AdamW with decay on matrices only: the trainer's decay_ranges() cover embedding and Linear weights.
    impl: fused (the kernel meshrun-trainer calls, at::_fused_adamw_), foreach or for-loop."""
    params = list(params)
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": t.get("weight_decay", 0.1)},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=t.get("lr", 3e-3), betas=(t.get("beta1", 0.9), t.get("beta2", 0.95)),
                             eps=t.get("eps", 1e-8), fused=impl == "fused", foreach=impl == "foreach")


def current_rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main():
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--config", required=True)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override, as meshrun-trainer's --set (repeatable)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--strategy", choices=STRATEGIES, default="", help="instead of the config's fsdp.strategy")
    p.add_argument("--data", default="", help="token file or text folder instead of the config's data.path")
    p.add_argument("--global-batch-size", type=int, default=0, help="instead of the config's train.global_batch_size")
    p.add_argument("--activation-checkpointing", action="store_true", help="recompute every block in backward")
    p.add_argument("--cpu-offload", action="store_true", help="FSDP2 CPUOffloadPolicy (CUDA)")
    p.add_argument("--adamw", choices=["fused", "foreach", "for-loop"], default="",
                   help="AdamW implementation (default fused, as meshrun-trainer; for-loop with --cpu-offload)")
    p.add_argument("--profile", action="store_true", help="print where GPU (CPU: host) time goes in the last 3 steps")
    p.add_argument("--init-from", default="", help="start from these weights (.safetensors, Hugging Face names: "
                   "meshrun-trainer's export) instead of the reference's own initialisation")
    p.add_argument("--save-final", default="", help="write the trained weights there (.safetensors, rank 0)")
    a = p.parse_args()
    cfg = load_config(a.config, a.set)
    m, t, fs = cfg["model"], cfg["train"], cfg.get("fsdp", {})
    strategy = a.strategy or fs.get("strategy", "FULL_SHARD")
    if strategy not in STRATEGIES:
        raise ValueError(f"fsdp.strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    cuda = a.device == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    threads = cfg.get("system", {}).get("threads", 0)
    if threads > 0:
        torch.set_num_threads(threads)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    seed, seq = t.get("seed", 1234), t.get("seq_len", 128)
    gb, accum = a.global_batch_size or t.get("global_batch_size", 8), t.get("grad_accum_steps", 1)
    device = torch.device("cuda") if cuda else torch.device("cpu")
    mesh = resolve_mesh(strategy, device.type, world, fs.get("shard_group_size", 0))

    data = TokenData(cfg["data"], a.data)
    start_rss = current_rss_bytes()  # the baseline: runtime + process group + data, no model yet

    shard_args = {}
    param_dtype = DTYPES[fs.get("param_dtype", "fp32")]
    reduce_dtype = DTYPES[fs.get("reduce_dtype", "fp32")]
    if param_dtype != torch.float32 or reduce_dtype != torch.float32:
        if strategy == "NO_SHARD":
            raise ValueError("NO_SHARD (DDP) runs fp32 only here: set fsdp.param_dtype=fp32")
        shard_args["mp_policy"] = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    if a.cpu_offload or (cuda and fs.get("cpu_offload", False)):
        shard_args["offload_policy"] = CPUOffloadPolicy()
    ac_every = 1 if a.activation_checkpointing else int(fs.get("activation_checkpointing", 0))
    model = build_model(m, seq, strategy, mesh, device, seed, ac_every, shard_args)
    if a.init_from:
        load_hf_weights(model, a.init_from, m.get("tie_embeddings", True))
    # CUDA with CPU offload: the for-loop AdamW on the host, as scripts/gpu_kit.sh's offload figures were taken.
    impl = a.adamw or ("for-loop" if cuda and "offload_policy" in shard_args else "fused")
    opt = build_optimizer(model.parameters(), t, impl)
    base_lr = t.get("lr", 3e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: learning_rate(t, a.steps, i + 1) / base_lr)
    clip = t.get("grad_clip", 1.0)

    times, losses, profiler = [], [], None
    for step in range(1, a.steps + 1):
        if a.profile and step == a.steps - 2:
            activity = torch.profiler.ProfilerActivity.CUDA if cuda else torch.profiler.ProfilerActivity.CPU
            profiler = torch.profiler.profile(activities=[activity])
            profiler.__enter__()
        t0 = time.perf_counter()
        opt.zero_grad()
        total = torch.zeros((), device=device)
        for micro in range(accum):
            last = micro + 1 == accum
            x, y = sample_micro_batch(data, seed, step - 1, micro * gb, gb, seq, rank, world)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            if strategy != "NO_SHARD":
                model.set_requires_gradient_sync(last)
            with model.no_sync() if strategy == "NO_SHARD" and not last else contextlib.nullcontext():
                loss = F.cross_entropy(model(x).float().view(-1, m["vocab_size"]), y.reshape(-1)) / accum
                loss.backward()
            total += loss.detach()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        sched.step()
        dist.all_reduce(total)
        losses.append(total.item() / world)  # CUDA: the step is done when the host has its loss
        times.append(time.perf_counter() - t0)
    if profiler is not None:
        profiler.__exit__(None, None, None)
        if rank == 0:
            key = "cuda_time_total" if cuda else "self_cpu_time_total"
            print(profiler.key_averages().table(sort_by=key, row_limit=25), flush=True)
    steady = times[min(5, len(times) - 1):]
    tokens = gb * seq * accum
    result = {"rank": rank, "strategy": strategy, "world_size": world, "tokens_per_step": tokens,
              "tokens_per_s": tokens / statistics.median(steady), "final_loss": losses[-1],
              "start_rss_bytes": start_rss, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
              "step_times_s": [round(s, 6) for s in times], "losses": [round(v, 5) for v in losses],
              "losses_exact": losses}
    if cuda:
        result["device_peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
    if a.save_final:
        save_hf_weights(model, a.save_final, m.get("tie_embeddings", True))
    print(json.dumps(result), flush=True)
    dist.destroy_process_group()
    # NOTE: with a DeviceMesh on Gloo, torch 2.15 sometimes aborts during interpreter teardown after a clean
    # destroy_process_group ("terminate called without an active exception", about 1 exit in 3 here);
    # everything is reported by now, so leave without that teardown.
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
