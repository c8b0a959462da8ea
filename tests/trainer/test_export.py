#!/usr/bin/env python3
"""meshrun-trainer export: trains the tiny model (untied head, so every tensor kind appears) on 2 ranks
through a sharded checkpoint, exports it as safetensors, reads the file back with nothing but json and
torch.frombuffer, and checks every tensor against the trainer's own final parameters (params.bin), the
Hugging Face Llama names and config.json."""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import torch

EXPECTED_BLOCK = ["input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                  "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = memoryview(data)[8 + n:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        begin, end = info["data_offsets"]
        tensors[name] = torch.frombuffer(bytearray(body[begin:end]), dtype=torch.float32).reshape(info["shape"])
    return header, tensors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--config", required=True)
    args = ap.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    launcher = os.path.join(os.path.dirname(args.trainer), "meshrun")
    work = tempfile.mkdtemp(prefix="meshrun-export-test-")
    ck = os.path.join(work, "ck")
    sets = ["train.steps=5", "train.seq_len=32", "train.sample_tokens=0", "model.tie_embeddings=false",
            f"checkpoint.dir=\"{ck}\"", f"output.dir=\"{work}\"", "output.dump_params=true"]
    cmd = [launcher, "--standalone", "--nproc-per-node", "2", args.trainer, "--config", args.config]
    for s in sets:
        cmd += ["--set", s]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stdout + run.stderr

    out = os.path.join(work, "export", "hf", "model.safetensors")  # a folder that does not exist yet: made
    run = subprocess.run([args.trainer, "export", "--checkpoint", ck, "--out", out], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr

    header, tensors = read_safetensors(out)
    config = json.load(open(os.path.join(os.path.dirname(out), "config.json")))
    assert config["model_type"] == "llama" and config["architectures"] == ["LlamaForCausalLM"], config
    layers, dim, vocab = config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]
    assert (layers, dim, vocab, config["tie_word_embeddings"]) == (4, 128, 256, False), config

    # The trainer's own parameters, flat in unit order: root (embedding, norm, head), then each block.
    params = torch.frombuffer(bytearray(open(os.path.join(work, "params.bin"), "rb").read()), dtype=torch.float32)
    order = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    for i in range(layers):
        order += [f"model.layers.{i}.{p}.weight" for p in EXPECTED_BLOCK]
    assert sorted(order) == sorted(tensors), sorted(set(order) ^ set(tensors))
    assert tensors["model.layers.0.mlp.gate_proj.weight"].shape == (config["intermediate_size"], dim)
    assert tensors["model.layers.0.self_attn.k_proj.weight"].shape == (config["num_key_value_heads"] * config["head_dim"], dim)
    offset = 0
    for name in order:
        t = tensors[name]
        ref = params[offset:offset + t.numel()].reshape(t.shape)
        assert torch.equal(t, ref), f"{name}: max |diff| {(t - ref).abs().max().item()}"
        offset += t.numel()
    assert offset == params.numel(), (offset, params.numel())
    print(f"ok: {len(order)} tensors, {offset} parameters equal to the trainer's, step {header['__metadata__']['step']}")


if __name__ == "__main__":
    sys.exit(main())
