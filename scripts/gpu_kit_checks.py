"""The checks of scripts/gpu_kit.sh: run meshrun's GPU paths on the machine at hand and write one report
(report.txt and report.json, rewritten after every check so a run cut short still reports what it did).

Each check returns a status (pass, fail, skip) with a one-line summary and its figures. Checks that need a
GPU are skipped, saying so, where torch sees none. Only the standard library, and the torch and numpy of
the interpreter that runs this (the same one the trainer was built against).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

CHECKS = {}

# Dense bf16 peak FLOP/s by GPU name (NVIDIA's data sheets; SXM parts).
PEAK_BF16 = [("H200", 989e12), ("H100 PCIe", 756e12), ("H100", 989e12), ("A100", 312e12), ("L40S", 362e12)]


def check(name, needs_gpu, about):
    def register(fn):
        CHECKS[name] = (fn, needs_gpu, about)
        return fn
    return register


class Report:
    def __init__(self, out):
        self.out, self.machine, self.checks = out, {}, []

    def add(self, name, status, summary, figures=None, seconds=0.0):
        self.checks.append({"check": name, "status": status, "summary": summary, "figures": figures or {},
                            "seconds": round(seconds, 1)})
        print(f"[gpu-kit] {status.upper():4s} {name}: {summary}", flush=True)
        self.write()

    def write(self):
        with open(os.path.join(self.out, "report.json"), "w") as f:
            json.dump({"machine": self.machine, "checks": self.checks}, f, indent=1)
        lines = ["meshrun GPU kit report", ""] + [f"{k}: {v}" for k, v in self.machine.items()] + [""]
        for c in self.checks:
            lines.append(f"{c['status'].upper():4s} {c['check']} ({c['seconds']} s): {c['summary']}")
            lines += [f"       {k} = {v}" for k, v in c["figures"].items()]
        with open(os.path.join(self.out, "report.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")


class Kit:
    """Paths, the environment every program gets, and the runs the checks share."""

    def __init__(self, root, bin_dir, out, work):
        self.root, self.bin, self.out, self.work = root, bin_dir, out, work
        self.results = {}  # check name -> figures, for checks that compare with another's run
        self.env = dict(os.environ, PYTHON_EXEC=sys.executable, PYTHONUNBUFFERED="1")
        nccl = nccl_lib_dir()
        if nccl:  # torch's wheel keeps its NCCL beside itself; make it the one the probe and bench see
            self.env["LD_LIBRARY_PATH"] = nccl + os.pathsep + self.env.get("LD_LIBRARY_PATH", "")
        self.gpu_name = gpu_name()
        self.peak = next((p for key, p in PEAK_BF16 if key in self.gpu_name), 989e12)

    def run(self, tag, cmd, timeout=600, env=None):
        """Runs cmd; its whole output goes to <out>/logs/<tag>.log (kept small) and is returned."""
        start = time.monotonic()
        try:
            p = subprocess.run(cmd, cwd=self.root, env=env or self.env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=timeout)
            rc, text = p.returncode, p.stdout
        except subprocess.TimeoutExpired as e:
            rc, text = 124, (e.stdout or b"").decode(errors="replace") + f"\n[timed out after {timeout} s]"
        with open(os.path.join(self.work, tag + ".log"), "w") as f:
            f.write(" ".join(cmd) + "\n" + text)
        return rc, text, time.monotonic() - start

    def meshrun(self, nproc, *rest):
        return [os.path.join(self.bin, "meshrun"), "--standalone", "--nproc-per-node", str(nproc), *rest]

    def tokens(self, name, vocab, count=8_000_000):
        """A file of random token ids: throughput does not depend on what the tokens say."""
        path = os.path.join(self.work, name)
        if not os.path.exists(path):
            dtype = np.uint16 if vocab <= 65536 else np.uint32
            np.random.default_rng(0).integers(0, vocab, count, dtype=dtype).tofile(path)
        return path

    def train(self, tag, config, sets, nproc=1, steps=30, timeout=600):
        """meshrun-trainer under meshrun (the daemon's store; NCCL unless told otherwise). Returns
        (rc, tail of the output, figures) with per-step records and the rank reports."""
        out_dir = os.path.join(self.work, tag)
        shutil.rmtree(out_dir, ignore_errors=True)
        cmd = self.meshrun(nproc, "--no-python", os.path.join(self.bin, "meshrun-trainer"),
                           "--config", os.path.join(self.root, "configs", config),
                           "--set", f"train.steps={steps}", "--set", "train.sample_tokens=0",
                           "--set", "output.progress_bar=false", "--set", f'output.dir="{out_dir}"',
                           "--set", f"system.peak_flops={self.peak}")
        for s in sets:
            cmd += ["--set", s]
        rc, text, seconds = self.run(tag, cmd, timeout)
        steps_log, ranks = [], []
        metrics = os.path.join(out_dir, "metrics.jsonl")
        if os.path.exists(metrics):
            steps_log = [json.loads(l) for l in open(metrics) if '"tokens_per_s"' in l]
        for r in range(nproc):
            path = os.path.join(out_dir, f"rank{r}.json")
            if os.path.exists(path):
                ranks.append(json.load(open(path)))
        return rc, tail(text), {"steps": steps_log, "ranks": ranks, "seconds": seconds, "output": text}

    def reference(self, tag, config, extra, steps=30, timeout=600):
        """PyTorch FSDP2 (bench/trainer/train_fsdp2_reference.py) on the same GPU, started by torchrun."""
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
               os.path.join(self.root, "bench", "trainer", "train_fsdp2_reference.py"),
               "--config", os.path.join(self.root, "configs", config), "--device", "cuda", "--steps", str(steps), *extra]
        rc, text, _ = self.run(tag, cmd, timeout)
        lines = [l[l.index('{"rank"'):] for l in text.splitlines() if '{"rank"' in l]
        return rc, tail(text), (json.loads(lines[0]) if lines else None)


def tail(text, lines=15):
    return "\n".join(text.strip().splitlines()[-lines:])


def nccl_lib_dir():
    try:
        import importlib.util
        spec = importlib.util.find_spec("nvidia.nccl")
        if spec and spec.submodule_search_locations:
            lib = os.path.join(list(spec.submodule_search_locations)[0], "lib")
            return lib if os.path.isdir(lib) else ""
    except ImportError:
        pass
    return ""


def gpu_name():
    try:
        import torch
        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
    except Exception:  # no driver, or a CPU-only torch
        return ""


def median_tps(steps, skip=5):
    timed = steps[skip:] or steps
    return statistics.median(s["tokens_per_s"] for s in timed) if timed else 0.0


def gib(b):
    return round(b / 2**30, 2)


# --- the checks ---------------------------------------------------------------------------------------------

@check("check", needs_gpu=False, about="meshrun check: GPU count, CUDA_VISIBLE_DEVICES, driver, NCCL version")
def check_probe(kit):
    rc, text, _ = kit.run("check", [os.path.join(kit.bin, "meshrun"), "check", "--nproc-per-node", "1", "--json"])
    try:
        report = json.loads(text[text.index("{"):])
    except ValueError:
        return "fail", f"meshrun check printed no JSON (exit {rc}): {tail(text, 3)}", {}
    by_name = {c["name"]: c for c in report["checks"]}
    gpu = by_name.get("gpu.devices", {})
    figures = {k: gpu.get("data", {}).get(k) for k in ("device_count", "driver_version", "driver_release",
                                                      "cuda_visible_devices", "nccl_version")}
    figures.update({n: f"{c['status']}: {c['detail']}" for n, c in by_name.items() if n.startswith("gpu.")})
    want_gpu = bool(kit.gpu_name)
    ok = report["verdict"] != "FAIL" and (not want_gpu or (figures["device_count"] or 0) > 0)
    return ("pass" if ok else "fail"), f"verdict {report['verdict']}, {figures['device_count']} GPU(s), " \
        f"NCCL {figures['nccl_version'] or 'not found'}", figures


WORKER_PROBE = """import json, os, torch
lr = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(lr)
print("PROBE " + json.dumps({"rank": int(os.environ["RANK"]), "local_rank": lr,
      "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "device_count": torch.cuda.device_count(),
      "current": torch.cuda.current_device(), "pci": torch.cuda.get_device_properties(lr).pci_bus_id}), flush=True)
"""


@check("devices", needs_gpu=True, about="--nproc-per-node gpu and --virtual-local-rank: workers see the right GPU")
def check_devices(kit):
    import torch
    probe = os.path.join(kit.work, "probe.py")
    with open(probe, "w") as f:
        f.write(WORKER_PROBE)
    count = torch.cuda.device_count()
    figures, problems = {}, []
    for tag, flags in (("plain", []), ("virtual", ["--virtual-local-rank"])):
        rc, text, _ = kit.run("devices_" + tag, kit.meshrun("gpu", *flags, probe))
        seen = sorted((json.loads(l.split("PROBE ", 1)[1]) for l in text.splitlines() if "PROBE " in l),
                      key=lambda w: w["rank"])
        figures[tag] = seen
        if rc != 0 or len(seen) != count:
            problems.append(f"{tag}: exit {rc}, {len(seen)} of {count} workers reported")
            continue
        for w in seen:
            expect_cvd = str(w["rank"]) if flags else os.environ.get("CUDA_VISIBLE_DEVICES")
            expect_lr = 0 if flags else w["rank"]
            if w["local_rank"] != expect_lr or w["current"] != expect_lr or w["cuda_visible_devices"] != expect_cvd:
                problems.append(f"{tag}: rank {w['rank']} saw LOCAL_RANK={w['local_rank']} "
                                f"CUDA_VISIBLE_DEVICES={w['cuda_visible_devices']}")
    if problems:
        return "fail", "; ".join(problems), figures
    return "pass", f"{count} worker(s) per node, each on its own GPU, with and without --virtual-local-rank", figures


@check("nccl_bench", needs_gpu=True, about="meshrun-nccl-bench under meshrun: the NCCL id through the store, a sweep")
def check_nccl_bench(kit):
    bench = os.path.join(kit.bin, "meshrun-nccl-bench")
    if not os.path.exists(bench):
        return "fail", "meshrun-nccl-bench was not built (CMake found no CUDA+NCCL)", {}
    rc, text, _ = kit.run("nccl_bench", kit.meshrun("gpu", "--no-python", bench, "-b", "8", "-e", "256M", "-f", "4",
                                                    "-w", "3", "-n", "10"))
    # Rank 0's lines carry meshrun's "[rank0]:" prefix; a table row starts with the message size.
    lines = [l.split("]:", 1)[1] if l.startswith("[rank") else l for l in text.splitlines()]
    rows = [l for l in lines if l.strip() and l.split()[0].isdigit()]
    figures = {"rows": len(rows), "table": tail(text, len(rows) + 4)}
    if rc != 0 or not rows:
        return "fail", f"exit {rc}: {tail(text, 3)}", figures
    return "pass", f"{len(rows)} sizes swept, no errors (one rank per GPU; world 1 moves no bytes: busbw 0)", figures


def compare_training(kit, name, config, sets, ref_extra, steps):
    """Ours vs FSDP2 on the same GPU: tokens/s, MFU, peak GPU memory and the ratios."""
    rc, out, ours = kit.train(name, config, sets, steps=steps)
    if rc != 0 or not ours["steps"]:
        return "fail", f"meshrun-trainer exit {rc}: {out}", {}
    tps = median_tps(ours["steps"])
    mfu = statistics.median(s["mfu"] for s in ours["steps"][5:] or ours["steps"])
    peak = ours["ranks"][0].get("device_peak_allocated_bytes", 0) if ours["ranks"] else 0
    figures = {"tokens_per_s": round(tps), "mfu": round(mfu, 3), "peak_gpu_gib": gib(peak),
               "comm_share": round(statistics.median(s["comm_share"] for s in ours["steps"]), 4),
               "final_loss": round(ours["steps"][-1]["loss"], 4), "backend_line": first_line(ours["output"], "meshrun-trainer: model")}
    kit.results[name] = figures
    rrc, rout, ref = kit.reference(name + "_fsdp2", config, ref_extra, steps=steps)
    if ref is None:
        return "fail", f"FSDP2 reference exit {rrc}: {rout}", figures
    figures.update({"fsdp2_tokens_per_s": round(ref["tokens_per_s"]), "fsdp2_peak_gpu_gib": gib(ref["device_peak_allocated_bytes"]),
                    "fsdp2_mfu": round(mfu * ref["tokens_per_s"] / tps, 3),
                    "throughput_ratio": round(tps / ref["tokens_per_s"], 3),
                    "memory_ratio": round(peak / ref["device_peak_allocated_bytes"], 3)})
    summary = (f"{tps:,.0f} tok/s, MFU {mfu:.1%}, peak {gib(peak)} GiB | FSDP2 {ref['tokens_per_s']:,.0f} tok/s, "
               f"peak {figures['fsdp2_peak_gpu_gib']} GiB | x{figures['throughput_ratio']} throughput, "
               f"x{figures['memory_ratio']} memory")
    return "pass", summary, figures


def first_line(text, prefix):
    return next((l.strip() for l in text.splitlines() if prefix in l), "")


@check("train_150m", needs_gpu=True, about="150m, bf16 compute / fp32 reduce, NCCL, world 1: vs FSDP2")
def check_train_150m(kit):
    data = kit.tokens("tokens_u16.bin", 50304)
    return compare_training(kit, "train_150m", "150m.json",
                            [f'data.path="{data}"', "system.device=cuda", "fsdp.reduce_dtype=fp32"],
                            ["--data", data], steps=30)


ONE_B = ["train.global_batch_size=8"]


@check("train_1b", needs_gpu=True, about="1b (8 x 2048 tokens a step), bf16 / fp32 reduce, NCCL, world 1: vs FSDP2")
def check_train_1b(kit):
    data = kit.tokens("tokens_u32.bin", 128256)
    return compare_training(kit, "train_1b", "1b.json",
                            [f'data.path="{data}"', "system.device=cuda", "fsdp.reduce_dtype=fp32", *ONE_B],
                            ["--data", data, "--global-batch-size", "8"], steps=25)


@check("offload_ac_1b", needs_gpu=True, about="1b with CPU offload, and with activation checkpointing: vs the plain run")
def check_offload_ac(kit):
    data = kit.tokens("tokens_u32.bin", 128256)
    base = [f'data.path="{data}"', "system.device=cuda", "fsdp.reduce_dtype=fp32", *ONE_B]
    plain = kit.results.get("train_1b")
    if plain is None:
        rc, out, run = kit.train("plain_1b", "1b.json", base, steps=15)
        if rc != 0:
            return "fail", f"plain run exit {rc}: {out}", {}
        plain = {"tokens_per_s": median_tps(run["steps"]), "peak_gpu_gib": gib(run["ranks"][0]["device_peak_allocated_bytes"])}
    figures, failed = {"plain": plain}, []
    for tag, extra, steps in (("offload", ["fsdp.cpu_offload=true"], 8), ("ac", ["fsdp.activation_checkpointing=1"], 15)):
        rc, out, run = kit.train(tag + "_1b", "1b.json", base + extra, steps=steps)
        if rc != 0 or not run["steps"]:
            failed.append(f"{tag}: exit {rc}: {out}")
            continue
        tps = median_tps(run["steps"], skip=3)
        peak = run["ranks"][0].get("device_peak_allocated_bytes", 0)
        figures[tag] = {"tokens_per_s": round(tps), "peak_gpu_gib": gib(peak), "peak_rss_gib": gib(run["ranks"][0]["peak_rss_bytes"]),
                        "speed_vs_plain": round(tps / plain["tokens_per_s"], 3),
                        "memory_vs_plain": round(gib(peak) / plain["peak_gpu_gib"], 3)}
    # FSDP2's CPUOffloadPolicy as the anchor for the offloaded run (its AdamW also steps on the host).
    rrc, rout, ref = kit.reference("offload_1b_fsdp2", "1b.json", ["--data", data, "--global-batch-size", "8",
                                                                     "--cpu-offload"], steps=8)
    if ref is not None and "offload" in figures:
        figures["offload"]["fsdp2_tokens_per_s"] = round(ref["tokens_per_s"])
        figures["offload"]["fsdp2_peak_gpu_gib"] = gib(ref["device_peak_allocated_bytes"])
    elif ref is None:
        failed.append(f"FSDP2 offload reference exit {rrc}: {rout}")
    if failed:
        return "fail", "; ".join(failed), figures
    return "pass", "; ".join(f"{t}: x{figures[t]['speed_vs_plain']} speed, x{figures[t]['memory_vs_plain']} GPU memory"
                             for t in ("offload", "ac")) + \
        f" (FSDP2 offloaded: {figures['offload'].get('fsdp2_tokens_per_s')} tok/s)", figures


@check("profile_1b_fsdp2", needs_gpu=True, about="where GPU time goes in the 1b step (PyTorch profiler on the FSDP2 twin)")
def check_profile(kit):
    data = kit.tokens("tokens_u32.bin", 128256)
    rc, out, ref = kit.reference("profile_1b_fsdp2", "1b.json", ["--data", data, "--global-batch-size", "8", "--profile"],
                                 steps=10)
    if ref is None:
        return "fail", f"exit {rc}: {out}", {}
    log = open(os.path.join(kit.work, "profile_1b_fsdp2.log")).read()
    table = [l for l in log.splitlines() if l.startswith(("-", "Name", " ")) or "  " in l][:40]
    return "pass", "kernel time table (3 steps) in figures", {"table": "\n".join(table)}


def tiny_sets(kit, *extra):
    data = kit.tokens("tokens_byte.bin", 256, count=2_000_000)
    return ["data.format=bin_u16", f'data.path="{data}"', "model.vocab_size=256", *extra]


def max_rel_diff(a, b):
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")


@check("gloo_world2", needs_gpu=True, about="two ranks on one GPU over Gloo (CUDA tensors): loss parity with world 1")
def check_gloo_world2(kit):
    rc1, out1, one = kit.train("tiny_world1", "tiny.json", tiny_sets(kit, "system.device=cuda"), nproc=1, steps=20)
    rc2, out2, two = kit.train("tiny_world2_gloo", "tiny.json", tiny_sets(kit, "system.device=cuda", "system.backend=gloo"),
                               nproc=2, steps=20)
    if rc1 != 0 or rc2 != 0:
        return "fail", f"world 1 exit {rc1}, world 2 exit {rc2}: {out2 if rc2 else out1}", {}
    l1 = [s["loss"] for s in one["steps"]]
    l2 = [s["loss"] for s in two["steps"]]
    diff = max_rel_diff(l2, l1)
    figures = {"max_relative_loss_difference": diff, "world1_final_loss": l1[-1], "world2_final_loss": l2[-1],
               "world2_devices": [r.get("device") for r in two["ranks"]]}
    status = "pass" if diff < 1e-4 else "fail"
    return status, f"20 steps, losses of world 2 (Gloo, cuda) vs world 1 (NCCL) differ by at most {diff:.2e} relative", figures


@check("checkpoint_cross_device", needs_gpu=True,
       about="a checkpoint saved on the GPU resumes on the CPU with another world size, and back")
def check_checkpoint(kit):
    ckpt = lambda tag: os.path.join(kit.work, "ckpt_" + tag)
    for tag in ("gpu", "cpu", "back"):
        shutil.rmtree(ckpt(tag), ignore_errors=True)
    rc, out, gpu = kit.train("ckpt_gpu", "tiny.json", tiny_sets(kit, "system.device=cuda", f'checkpoint.dir="{ckpt("gpu")}"',
                                                                "checkpoint.interval=10"), steps=20)
    if rc != 0:
        return "fail", f"GPU run exit {rc}: {out}", {}
    rc, out, cpu = kit.train("ckpt_cpu", "tiny.json", tiny_sets(kit, "system.device=cpu", f'checkpoint.dir="{ckpt("cpu")}"',
                                                                "checkpoint.interval=5",
                                                                f'checkpoint.resume="{ckpt("gpu")}/step_00000010"'),
                             nproc=2, steps=20)
    if rc != 0:
        return "fail", f"CPU world-2 resume of the GPU checkpoint exit {rc}: {out}", {}
    rc, out, back = kit.train("ckpt_back", "tiny.json", tiny_sets(kit, "system.device=cuda", f'checkpoint.dir="{ckpt("back")}"',
                                                                 f'checkpoint.resume="{ckpt("cpu")}/step_00000015"'), steps=20)
    if rc != 0:
        return "fail", f"GPU world-1 resume of the CPU checkpoint exit {rc}: {out}", {}
    ref = {s["step"]: s["loss"] for s in gpu["steps"]}
    on_cpu = [(s["loss"], ref[s["step"]]) for s in cpu["steps"]]
    again = [(s["loss"], ref[s["step"]]) for s in back["steps"]]
    figures = {"cpu_resumed_steps": [s["step"] for s in cpu["steps"]][:1] + [cpu["steps"][-1]["step"]],
               "gpu_resumed_steps": [s["step"] for s in back["steps"]][:1] + [back["steps"][-1]["step"]],
               "cpu_vs_gpu_max_rel": max_rel_diff(*zip(*on_cpu)), "back_vs_gpu_max_rel": max_rel_diff(*zip(*again))}
    ok = figures["cpu_resumed_steps"][0] == 11 and figures["gpu_resumed_steps"][0] == 16 and \
        max(figures["cpu_vs_gpu_max_rel"], figures["back_vs_gpu_max_rel"]) < 1e-3
    return ("pass" if ok else "fail"), (
        f"GPU world 1 step 10 -> CPU world 2 (steps 11-20, max rel loss diff {figures['cpu_vs_gpu_max_rel']:.1e}) "
        f"-> its step 15 -> GPU world 1 (steps 16-20, {figures['back_vs_gpu_max_rel']:.1e})"), figures


@check("progress", needs_gpu=True,
       about="progress on a GPU: trainer beats in status (NCCL), a stopped NCCL worker named hung and restarted")
def check_progress(kit):
    """meshrun-trainer (cuda, NCCL) beats: the daemon's status shows its step and loss. A PyTorch NCCL worker
    that SIGSTOPs itself is named hung (with py-spy's stack when .gpu-kit/tools has it) and attempt 1, with a
    fresh store and a new NCCL communicator, runs to the end."""
    env = dict(kit.env)
    tools = os.path.join(kit.root, ".gpu-kit", "tools")
    env["PATH"] = tools + os.pathsep + os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    daemon = subprocess.Popen([os.path.join(kit.bin, "meshrun-rendezvous"), "--host", "127.0.0.1", "--port", "0",
                               "--log-level", "warn"], stdout=subprocess.PIPE, text=True)
    endpoint = daemon.stdout.readline().split("listening on ")[1].strip()
    out_dir = os.path.join(kit.work, "progress_trainer")
    cmd = [os.path.join(kit.bin, "meshrun"), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id",
           "gpu-beats", "--nproc-per-node", "1", "--no-python", os.path.join(kit.bin, "meshrun-trainer"),
           "--config", os.path.join(kit.root, "configs", "tiny.json"), "--set", "train.steps=3000",
           "--set", "train.sample_tokens=0", "--set", f'output.dir="{out_dir}"', *sum(
               (["--set", s] for s in tiny_sets(kit, "system.device=cuda")), [])]
    job = subprocess.Popen(cmd, cwd=kit.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen, t0 = None, time.monotonic()
    while job.poll() is None and time.monotonic() - t0 < 120:
        q = subprocess.run([os.path.join(kit.bin, "meshrun-rendezvous"), "status", "--endpoint", endpoint, "--json"],
                           capture_output=True, text=True)
        ranks = [r for run in json.loads(q.stdout or "{}").get("runs", []) for n in run.get("nodes", [])
                 for r in n.get("ranks", [])]
        if ranks and ranks[0].get("step", 0) >= 20:
            seen = ranks[0]
            break
        time.sleep(0.05)
    trainer_out = job.communicate(timeout=600)[0]
    daemon.terminate()
    daemon.wait(timeout=30)
    figures = {"trainer_rank_in_status": seen, "trainer_exit": job.returncode}
    if seen is None or job.returncode != 0 or not seen.get("loss", 0) > 0:
        return "fail", f"trainer beats not seen in status (exit {job.returncode}): {tail(trainer_out, 5)}", figures
    pj_out = os.path.join(kit.work, "progress_nccl")
    shutil.rmtree(pj_out, ignore_errors=True)
    os.makedirs(pj_out)
    rc, text, seconds = kit.run("progress_nccl", kit.meshrun(1, "--hang-floor", "3", "--max-restarts", "1",
                                                             "--shutdown-timeout", "5",
                                                             os.path.join(kit.root, "tests", "launcher", "progress_job.py"),
                                                             "60", "0.05", "--backend", "nccl", "--stop-rank", "0",
                                                             "--stop-at", "10"),
                                env=dict(env, PROGRESS_JOB_OUT=pj_out))
    done = os.path.join(pj_out, "done.0")
    attempt = open(done).read() if os.path.exists(done) else None
    figures.update({"nccl_exit": rc, "nccl_seconds": round(seconds, 1), "nccl_done_attempt": attempt,
                    "hang_line": next((l for l in text.splitlines() if "is hung" in l), None),
                    "stack_tool": next((l.strip() for l in text.splitlines() if l.strip().startswith("stack")), None)})
    ok = rc == 0 and attempt == "1" and "worker hung" in text and "restarting the workers (restart 1 of 1)" in text
    if not ok:
        return "fail", f"NCCL hang/restart: exit {rc}, done.0={attempt}: {tail(text, 8)}", figures
    return "pass", (f"trainer on cuda: step {seen['step']} loss {seen['loss']:.3f} in status; a stopped NCCL worker "
                    f"named hung ({figures['hang_line']}) and attempt 1 completed"), figures


# --- driver -------------------------------------------------------------------------------------------------

def machine_facts(kit):
    facts = {"gpu": kit.gpu_name or "none visible to torch", "python": sys.version.split()[0]}
    try:
        import torch
        facts.update({"torch": torch.__version__, "torch_cuda": torch.version.cuda,
                      "nccl": ".".join(map(str, torch.cuda.nccl.version())) if kit.gpu_name else None})
    except Exception as e:
        facts["torch"] = f"not importable: {e}"
    if shutil.which("nvidia-smi"):
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap",
                            "--format=csv,noheader"], capture_output=True, text=True)
        facts["nvidia-smi"] = q.stdout.strip()
    facts["peak_bf16_flops_used_for_mfu"] = kit.peak
    return facts


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--root")
    p.add_argument("--bin")
    p.add_argument("--out")
    p.add_argument("--list", action="store_true")
    p.add_argument("checks", nargs="*", help="names (default: all, in order)")
    a = p.parse_args()
    if a.list:
        for name, (_, needs_gpu, about) in CHECKS.items():
            print(f"{name:24s} {'GPU ' if needs_gpu else 'any '} {about}")
        return 0
    unknown = [c for c in a.checks if c not in CHECKS]
    if unknown:
        print(f"gpu_kit_checks: unknown check(s) {unknown}; known: {list(CHECKS)}", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="meshrun-gpu-kit-")
    kit = Kit(a.root, a.bin, a.out, work)
    report = Report(a.out)
    report.machine = machine_facts(kit)
    report.write()
    for name in a.checks or list(CHECKS):
        fn, needs_gpu, _ = CHECKS[name]
        if needs_gpu and not kit.gpu_name:
            report.add(name, "skip", "no CUDA device visible to torch on this machine: not run")
            continue
        start = time.monotonic()
        try:
            status, summary, figures = fn(kit)
        except Exception as e:  # a check's own bug must not hide the others
            status, summary, figures = "fail", f"{type(e).__name__}: {e}", {}
        report.add(name, status, summary, figures, time.monotonic() - start)
    # Logs and reports of every run, for the ones that failed: one small archive (no tokens, no checkpoints).
    import tarfile
    with tarfile.open(os.path.join(a.out, "logs.tar.gz"), "w:gz") as tar:
        for dirpath, _, files in os.walk(work):
            for f in files:
                if f.endswith((".log", ".json", ".jsonl")):
                    tar.add(os.path.join(dirpath, f), os.path.relpath(os.path.join(dirpath, f), work))
    shutil.rmtree(work, ignore_errors=True)
    return 1 if any(c["status"] == "fail" for c in report.checks) else 0


if __name__ == "__main__":
    sys.exit(main())
