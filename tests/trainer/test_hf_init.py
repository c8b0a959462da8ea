#!/usr/bin/env python3
"""model.init_from against Hugging Face transformers itself.

A small random LlamaForCausalLM (grouped-query attention, untied embeddings, rope theta 50000, rms eps 1e-6,
an intermediate size off the 8/3 rule) is written by transformers' save_pretrained, loaded by
meshrun-trainer on 1, 2 and 3 ranks, and the loss of step 1 (computed before any update) is compared with
transformers' loss on the same tokens. The training split holds exactly seq_len + 1 tokens, so every
sequence of the batch is that one window whatever the sampler draws.

The bound: both sides run the same fp32 arithmetic (embedding, RMSNorm, rotary tables, SDPA, SwiGLU,
cross-entropy); only summation order and fused-vs-unfused kernels differ, i.e. a few ulps per reduction,
1.2-1.8e-7 relative measured. REL_BOUND = 5e-6 leaves a factor 25 for other BLAS blockings and the 2-rank
loss all-reduce, and each case also checks that the nearest wrong models (rope theta 10000 instead
of 50000: 3e-2; llama3 scaling dropped: 4e-2; the weights rounded to bf16: 9e-5) miss transformers' loss by more than 10x the
bound, so the bound would catch those mistakes.

Cases (ctest runs each): loss, tied, bf16, llama3, roundtrip, errors.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

REL_BOUND = 5e-6
SEQ_LEN = 48
VOCAB = 384


def make_model(folder, rope="default", dtype=torch.float32, shard=None, theta=50000.0, tied=False):
    """Random weights from a fixed seed: the same for every call with the same shapes."""
    rope_parameters = {"rope_type": "default", "rope_theta": theta}
    if rope == "llama3":  # original 64 with head_dim 16: wavelength 6.3 kept, 24 blended, >= 94 stretched
        rope_parameters = {"rope_type": "llama3", "rope_theta": theta, "factor": 8.0, "low_freq_factor": 1.0,
                           "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=176, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, tie_word_embeddings=tied,
                         max_position_embeddings=128, initializer_range=0.25, rope_parameters=rope_parameters,
                         bos_token_id=5, eos_token_id=[7, 9])  # not LlamaConfig's defaults: an export must keep them
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # norm gains off 1.0, so a gain read into the wrong place shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    model = model.to(dtype)
    model.save_pretrained(folder, max_shard_size=shard) if shard else model.save_pretrained(folder)
    # The reference is transformers reading back what it wrote, in fp32 (an in-memory .to(bfloat16) would
    # also have rounded the rotary inv_freq buffer, which a load from the files computes afresh).
    return LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32)


def hf_loss(model, tokens):
    ids = torch.tensor(tokens.astype(np.int64))[None]
    with torch.no_grad():
        return model(ids, labels=ids).loss.item()


class Run:
    def __init__(self, args, work):
        self.trainer = args.trainer
        self.launcher = os.path.join(os.path.dirname(args.trainer), "meshrun")
        self.work = work
        rng = np.random.default_rng(7)
        self.tokens = rng.integers(0, VOCAB, size=SEQ_LEN + 1).astype(np.uint16)
        self.train_file = os.path.join(work, "train.bin")
        self.val = os.path.join(work, "val.bin")
        self.tokens.tofile(self.train_file)
        rng.integers(0, VOCAB, size=4 * SEQ_LEN).astype(np.uint16).tofile(self.val)
        self.count = 0

    def trainer_cmd(self, ranks, config_path, sets):
        cmd = [self.trainer, "--config", config_path]
        if ranks > 1:
            cmd = [self.launcher, "--standalone", "--nproc-per-node", str(ranks)] + cmd
        for s in sets:
            cmd += ["--set", s]
        return cmd

    def train(self, folder, ranks=1, sets=(), model=None, expect_ok=True, steps=1):
        """Runs the trainer; returns (process, output dir)."""
        self.count += 1
        out = os.path.join(self.work, f"out{self.count}")
        config = {"data": {"format": "bin_u16", "path": self.train_file, "val_path": self.val},
                  "model": dict({"init_from": folder}, **(model or {})),
                  "train": {"steps": steps, "global_batch_size": 6, "seq_len": SEQ_LEN, "sample_tokens": 0,
                            "log_interval": 1, "lr": 1e-4, "min_lr": 1e-5},
                  "output": {"dir": out}, "system": {"timeout_s": 60}}
        config_path = os.path.join(self.work, f"config{self.count}.json")
        json.dump(config, open(config_path, "w"))
        env = dict(os.environ, OMP_NUM_THREADS="1")
        run = subprocess.run(self.trainer_cmd(ranks, config_path, list(sets)), capture_output=True, text=True, env=env,
                             timeout=300)
        if expect_ok:
            assert run.returncode == 0, run.stdout + run.stderr
        return run, out


def first_loss(out):
    steps = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if '"loss"' in line]
    return steps[0]["loss"]


def bytes_read(out, ranks):
    return [json.load(open(os.path.join(out, f"rank{r}.json")))["init_from_bytes_read"] for r in range(ranks)]


def rel(a, b):
    return abs(a - b) / abs(b)


def assert_close(ours, ref, what):
    assert rel(ours, ref) <= REL_BOUND, f"{what}: meshrun {ours!r} vs transformers {ref!r} (rel {rel(ours, ref):.2e})"
    print(f"ok: {what}: meshrun {ours:.7f} transformers {ref:.7f} rel {rel(ours, ref):.1e}")


def assert_far(wrong, ref, what):
    assert rel(wrong, ref) > 10 * REL_BOUND, f"{what} is within 10x the bound (rel {rel(wrong, ref):.2e}): the test could not see it"
    print(f"ok: {what} misses by rel {rel(wrong, ref):.1e}")


def numel(model):
    return sum(p.numel() for p in model.parameters())


def case_loss(r):
    folder = os.path.join(r.work, "fp32")
    model = make_model(folder)
    ref = hf_loss(model, r.tokens)
    # The nearest wrong model: the default rope theta.
    wrong = make_model(os.path.join(r.work, "theta10k"), theta=10000.0)
    assert_far(hf_loss(wrong, r.tokens), ref, "rope theta 10000")
    total = 4 * numel(model)
    # 3 ranks: no unit's size divides by 3, so every chunk boundary falls inside a tensor and the last
    # rank's chunk ends in padding.
    for ranks in (1, 2, 3):
        run, out = r.train(folder, ranks)
        assert_close(first_loss(out), ref, f"{ranks} rank(s), fp32 file")
        assert "from " + folder in run.stdout, run.stdout
        read = bytes_read(out, ranks)
        assert sum(read) == total, (read, total)  # every byte once over the ranks...
        assert ranks == 1 or max(read) < total, read  # ...and each rank only its shard's
        print(f"ok: FULL_SHARD on {ranks} rank(s) read {read} bytes of {total}")


def case_tied(r):
    folder = os.path.join(r.work, "tied")
    model = make_model(folder, tied=True)
    assert "lm_head.weight" not in read_raw(os.path.join(folder, "model.safetensors"))  # transformers omits it
    ref = hf_loss(model, r.tokens)
    _, out = r.train(folder, 2)
    assert_close(first_loss(out), ref, "tied embeddings, 2 ranks")
    # An export that also carries the head (some tools write it): the embedding is what a tied model uses.
    state = load_file(os.path.join(folder, "model.safetensors"))
    save_file(dict(state, **{"lm_head.weight": state["model.embed_tokens.weight"].clone()}),
              os.path.join(folder, "model.safetensors"))
    run, out = r.train(folder, 1)
    assert_close(first_loss(out), ref, "tied embeddings with lm_head.weight present")
    assert "lm_head.weight not used: tie_word_embeddings is true" in run.stdout, run.stdout
    state["lm_head.weight"] = torch.zeros(VOCAB, 32)
    save_file(state, os.path.join(folder, "model.safetensors"))
    expect_error(r, folder, 1, "lm_head.weight", "[384,32]", "[384,64]")


def case_bf16(r):
    fp32 = make_model(os.path.join(r.work, "fp32"))
    folder = os.path.join(r.work, "bf16")
    model = make_model(folder, dtype=torch.bfloat16, shard="60KB")
    assert os.path.exists(os.path.join(folder, "model.safetensors.index.json")), os.listdir(folder)
    ref = hf_loss(model, r.tokens)
    assert_far(hf_loss(fp32, r.tokens), ref, "the fp32 weights")
    run, out = r.train(folder, 2)
    assert_close(first_loss(out), ref, "2 ranks, bf16 sharded files")
    assert "(BF16)" in run.stdout, run.stdout
    assert sum(bytes_read(out, 2)) == 2 * numel(model)


def case_llama3(r):
    folder = os.path.join(r.work, "llama3")
    model = make_model(folder, rope="llama3")
    ref = hf_loss(model, r.tokens)
    plain = make_model(os.path.join(r.work, "plain"))  # same weights, no scaling
    assert_far(hf_loss(plain, r.tokens), ref, "rope without llama3 scaling")
    _, out = r.train(folder, 1)
    assert_close(first_loss(out), ref, "llama3 rope scaling")


def read_raw(path):
    """name -> (dtype, shape, bytes) straight from the file."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    return {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


def case_roundtrip(r):
    for dtype, name, flag in ((torch.float32, "fp32", "fp32"), (torch.bfloat16, "bf16", "bf16")):
        folder = os.path.join(r.work, name)
        model = make_model(folder, dtype=dtype)
        ck = os.path.join(r.work, f"ck_{name}")
        # Trained on a shorter context than the model's: the export must still say 128.
        run, _ = r.train(folder, 2, steps=0, sets=[f'checkpoint.dir="{ck}"', "model.max_seq_len=64"])
        assert os.path.exists(os.path.join(ck, "step_00000000", "metadata.json")), run.stdout
        out = os.path.join(r.work, f"export_{name}", "model.safetensors")
        exp = subprocess.run([r.trainer, "export", "--checkpoint", ck, "--out", out, "--dtype", flag],
                             capture_output=True, text=True)
        assert exp.returncode == 0, exp.stdout + exp.stderr
        original, exported = read_raw(os.path.join(folder, "model.safetensors")), read_raw(out)
        assert sorted(original) == sorted(exported), sorted(set(original) ^ set(exported))
        for k in original:
            assert original[k] == exported[k], f"{name}: {k} differs after export -> import"
        # transformers reads the export (config.json included) into the same model; the keys we do not model
        # (token ids, the original context length) and the generation config come along.
        back = LlamaForCausalLM.from_pretrained(os.path.dirname(out), dtype=torch.float32)
        assert back.config.num_key_value_heads == 2 and back.config.tie_word_embeddings is False
        exported_config = json.load(open(os.path.join(os.path.dirname(out), "config.json")))
        assert exported_config["bos_token_id"] == 5 and exported_config["eos_token_id"] == [7, 9], exported_config
        assert exported_config["max_position_embeddings"] == 128, exported_config
        assert os.path.exists(os.path.join(os.path.dirname(out), "generation_config.json")), exp.stdout
        assert hf_loss(back, r.tokens) == hf_loss(model, r.tokens), name
        print(f"ok: {name}: {len(original)} tensors bit-identical after import -> checkpoint -> export")
    # A checkpoint to resume wins over model.init_from (which is then not read at all).
    run, out = r.train(os.path.join(r.work, "gone"), 1, steps=1,
                       sets=[f'checkpoint.dir="{os.path.join(r.work, "ck_fp32")}"', "checkpoint.resume=auto"],
                       model={}, expect_ok=False)
    assert run.returncode == 2 and "gone/config.json" in run.stderr, run.stderr  # config.json is still the shape
    os.makedirs(os.path.join(r.work, "shape_only"))
    shutil.copy(os.path.join(r.work, "fp32", "config.json"), os.path.join(r.work, "shape_only"))
    run, out = r.train(os.path.join(r.work, "shape_only"), 1, steps=1,
                       sets=[f'checkpoint.dir="{os.path.join(r.work, "ck_fp32")}"', "checkpoint.resume=auto"])
    assert "model.init_from is not read" in run.stdout, run.stdout
    assert bytes_read(out, 1) == [0]


def expect_error(r, folder, ranks, *needles, sets=(), model=None):
    run, _ = r.train(folder, ranks, sets=sets, model=model, expect_ok=False)
    assert run.returncode != 0, run.stdout
    for needle in needles:
        assert needle in run.stderr + run.stdout, f"'{needle}' not in:\n{run.stderr}"
    print(f"ok: refused: {[n for n in needles]}")


def case_errors(r):
    good = os.path.join(r.work, "fp32")
    make_model(good)
    state = load_file(os.path.join(good, "model.safetensors"))

    def variant(name, tensors=None, config_edit=None, weights=True):
        folder = os.path.join(r.work, name)
        os.makedirs(folder)
        config = json.load(open(os.path.join(good, "config.json")))
        if config_edit:
            config_edit(config)
        json.dump(config, open(os.path.join(folder, "config.json"), "w"))
        if weights:
            save_file(tensors if tensors is not None else state, os.path.join(folder, "model.safetensors"))
        return folder

    wide = variant("wide", config_edit=lambda c: c.update(intermediate_size=192))
    expect_error(r, wide, 2, "model.layers.0.mlp.gate_proj.weight", "[176,64]", "[192,64]")
    missing = variant("missing", tensors={k: v for k, v in state.items() if k != "lm_head.weight"})
    expect_error(r, missing, 1, "has no tensor lm_head.weight", "tie_word_embeddings is false")
    extra = variant("extra", tensors=dict(state, **{"model.layers.0.self_attn.q_proj.bias": torch.zeros(64)}))
    expect_error(r, extra, 1, "model.layers.0.self_attn.q_proj.bias", "no place")
    yarn = variant("yarn", config_edit=lambda c: c.update(rope_parameters={"rope_type": "yarn", "rope_theta": 5e4,
                                                                           "factor": 4.0}))
    expect_error(r, yarn, 1, "rope type 'yarn' is not supported")
    qwen = variant("qwen", config_edit=lambda c: c.update(attention_bias=True))
    expect_error(r, qwen, 1, "attention_bias is true")
    expect_error(r, good, 1, "model.n_kv_heads=4 (", "config.json: 2)", "--set model.n_kv_heads=2",
                 model={"n_kv_heads": 4})
    nothing = variant("bin_only", weights=False)
    open(os.path.join(nothing, "pytorch_model.bin"), "wb").close()
    expect_error(r, nothing, 1, "has neither model.safetensors", "PyTorch .bin weights")
    truncated = variant("truncated")
    path = os.path.join(truncated, "model.safetensors")
    os.truncate(path, os.path.getsize(path) - 100)
    expect_error(r, truncated, 2, path, "bytes")
    expect_error(r, os.path.join(r.work, "absent"), 1, "absent/config.json")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--case", required=True, choices=["loss", "tied", "bf16", "llama3", "roundtrip", "errors"])
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix=f"meshrun-hf-{args.case}-")
    try:
        globals()["case_" + args.case](Run(args, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
