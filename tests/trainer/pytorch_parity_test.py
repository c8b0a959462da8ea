"""meshrun-trainer against PyTorch's own parts, step by step: the same tiny Llama, the same initial weights,
the same batches, fp32 on 2 CPU ranks. meshrun-trainer (FULL_SHARD) on one side; on the other
bench/trainer/train_fsdp2_reference.py: an nn.Module with scaled_dot_product_attention, FSDP2 fully_shard,
torch.optim.AdamW, clip_grad_norm_ and a LambdaLR warm-up + cosine, started from the trainer's own
exported initial weights (--init-from). Both launched by meshrun --standalone.
  - per-step losses agree within REL (relative), every step;
  - the final weights agree: the largest difference of any tensor, relative to its norm, within WREL.
Prints both figures. The bench version (more steps, and PyTorch against itself with another reduction
order as the noise floor) is bench/trainer/trainer_parity.sh.
Usage: pytorch_parity_test.py MESHRUN TRAINER REPO [STEPS] [--reference-only]
  --reference-only: the reference FULL_SHARD (reduce-scatter) against the reference NO_SHARD (DDP's
  all-reduce), both from the trainer's initial weights: what another reduction order alone moves.
"""
import json
import os
import subprocess
import sys
import tempfile

MESHRUN, TRAINER, REPO = (os.path.abspath(a) for a in sys.argv[1:4])
STEPS = int(sys.argv[4]) if len(sys.argv) > 4 else 20
REFERENCE_ONLY = "--reference-only" in sys.argv
REL, WREL = 1e-4, 1e-4
CONFIG = os.path.join(REPO, "configs", "tiny.json")
VENV_BIN = os.path.join(REPO, ".venv", "bin")
ENV = dict(os.environ, OMP_NUM_THREADS="1", PATH=VENV_BIN + os.pathsep + os.environ["PATH"])


def run(argv):
    p = subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(argv[:6])} ... exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout


def trainer(work, name, steps, sets):
    ck, out = os.path.join(work, name, "ck"), os.path.join(work, name, "out")
    run([MESHRUN, "--standalone", "--nproc-per-node", "2", TRAINER, "--config", CONFIG,
         "--set", "system.device=cpu", "--set", "train.sample_tokens=0", "--set", "output.progress_bar=false",
         "--set", f"train.steps={steps}", "--set", f'checkpoint.dir="{ck}"', "--set", f'output.dir="{out}"', *sets])
    weights = os.path.join(work, name, "model.safetensors")
    run([TRAINER, "export", "--checkpoint", ck, "--out", weights])
    return out, weights


def reference(work, init, strategy):
    """The reference's per-step losses and its final weights' file."""
    final = os.path.join(work, f"reference_{strategy}.safetensors")
    printed = run([MESHRUN, "--standalone", "--nproc-per-node", "2", os.path.join(REPO, "bench", "trainer", "train_fsdp2_reference.py"),
                   "--config", CONFIG, "--set", f"train.steps={STEPS}", "--steps", str(STEPS), "--strategy", strategy,
                   "--init-from", init, "--save-final", final])
    lines = [line.split("]:", 1)[-1] for line in printed.splitlines()]  # without meshrun's "[rankN]:"
    results = [json.loads(line) for line in lines if line.startswith('{"rank": 0')]
    if not results:
        sys.exit("FAILED: the reference printed no result for rank 0:\n" + printed[-3000:])
    return results[0]["losses_exact"], final


def main():
    import torch
    from safetensors.torch import load_file

    with tempfile.TemporaryDirectory() as work:
        _, init = trainer(work, "init", 0, [])  # the trainer's own initial weights (train.steps=0)
        if REFERENCE_ONLY:
            losses, ours_final = reference(work, init, "NO_SHARD")
            ours = {i + 1: v for i, v in enumerate(losses)}
        else:
            out, ours_final = trainer(work, "trainer", STEPS, [])
            ours = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if line.strip()]
            ours = {r["step"]: r["loss"] for r in ours if "loss" in r and "step" in r}
        theirs, theirs_final = reference(work, init, "FULL_SHARD")
        problems = []
        worst = 0.0
        rels = {}
        for step in range(1, STEPS + 1):
            if step not in ours:
                problems.append(f"meshrun-trainer logged no loss for step {step}")
                continue
            rel = abs(ours[step] - theirs[step - 1]) / abs(theirs[step - 1])
            rels[step] = rel
            worst = max(worst, rel)
            if rel > REL:
                problems.append(f"step {step}: loss {ours[step]:.8f} vs PyTorch {theirs[step - 1]:.8f} ({rel:.2e})")
        a, b = load_file(ours_final), load_file(theirs_final)
        if sorted(a) != sorted(b):
            problems.append(f"the final weights name different tensors: {sorted(set(a) ^ set(b))}")
        wworst, wname = 0.0, ""
        for k in sorted(set(a) & set(b)):
            rel = float((a[k].double() - b[k].double()).norm() / b[k].double().norm())
            if rel > wworst:
                wworst, wname = rel, k
        if wworst > WREL:
            problems.append(f"final weights differ: {wname} by {wworst:.2e} of its norm")
        who = "PyTorch NO_SHARD vs FULL_SHARD" if REFERENCE_ONLY else "meshrun-trainer vs PyTorch"
        # How the difference grows: the first step past each bound, and the median per stretch of steps.
        firsts = {b: next((k for k in sorted(rels) if rels[k] > b), None) for b in (1e-6, 1e-5, 1e-4, 1e-3)}
        stretches = [(lo, min(lo + 49, STEPS)) for lo in range(1, STEPS + 1, 50)]
        medians = [sorted(rels[k] for k in range(lo, hi + 1) if k in rels) for lo, hi in stretches]
        print(f"{who}: first step past " + ", ".join(f"{b:g}: {firsts[b]}" for b in firsts) + "; median per "
              + ", ".join(f"steps {lo}-{hi}: {m[len(m) // 2]:.1e}" for (lo, hi), m in zip(stretches, medians) if m))
        print(f"{who}, {STEPS} steps, tiny, fp32, 2 ranks: loss {ours[1]:.6f} -> {ours.get(STEPS, float('nan')):.6f}; "
              f"largest per-step loss difference {worst:.2e} relative (bound {REL:g}); final weights: largest "
              f"difference {wworst:.2e} of a tensor's norm ({wname}; bound {WREL:g})")
    for p in problems:
        print("FAILED:", p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
