"""Every way a script ends, under torchrun and meshrun side by side: the job's outcome must mean the same.

Each scenario is a 2-rank Gloo script run by both launchers (--standalone). Compared: whether the job
succeeded (exit 0) or failed, and for a failure the exit code meshrun documents (the first failed
worker's code; torchrun always says 1); nothing the script started is left running under meshrun (a
daemonized child included). PyTorch's own abort at interpreter exit (a race: pytorch/pytorch#190489) is
accepted from meshrun only in a scenario that ends well and where torchrun, in this same run, aborted too (a
meshrun that aborted every time fails), never where the script exits with a code of its own (sys.exit(n),
os._exit(n), an exception); under meshrun its summary must name it. Usage: exit_parity_test.py MESHRUN VENV_BIN
"""
import os
import subprocess
import sys
import tempfile
import time

MESHRUN, VENV_BIN = (os.path.abspath(a) for a in sys.argv[1:3])

PRELUDE = """import os, sys, time, subprocess
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(8)
for _ in range(3):
    dist.all_reduce(t)
"""
# name -> (script body after the prelude, expected: "ok" or the failed worker's exit code)
SCENARIOS = {
    "destroy right after the last collective": ("dist.destroy_process_group()\n", "ok"),
    "no destroy at all": ("", "ok"),
    "sys.exit(3) on one rank": ("dist.barrier()\nif rank == 1:\n    sys.exit(3)\ntime.sleep(1)\n", 3),
    "os._exit(0) on every rank": ("dist.barrier()\nos._exit(0)\n", "ok"),
    "os._exit(5) on one rank": ("dist.barrier()\nif rank == 0:\n    os._exit(5)\ntime.sleep(1)\n", 5),
    "an exception after the last collective": (
        "dist.barrier()\nif rank == 1:\n    raise RuntimeError('late failure')\ntime.sleep(1)\n", 1),
    "a rank that finishes much earlier": ("if rank == 0:\n    time.sleep(4)\n", "ok"),
    "a worker that daemonizes a child": (
        "if rank == 0:\n"
        "    subprocess.Popen(['sleep', '300'], start_new_session=True, stdout=subprocess.DEVNULL,\n"
        "                     stderr=subprocess.DEVNULL, env=dict(os.environ, EXIT_PARITY_MARK=os.environ['MARK']))\n",
        "ok"),
}
# The same scripts once more where the job may restart (--max-restarts 1): meshrun's standby workers and quick
# exit are on; the failure happens in both attempts, and the outcome must still mean the same.
RESTARTED = ("an exception after the last collective",)


def marked(entry):
    """Processes whose environment holds `entry`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if entry.encode() in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            pass
    return found


def leftovers(mark):
    """Processes still carrying `mark` in their environment (a child a worker daemonized)."""
    return marked(f"EXIT_PARITY_MARK={mark}")


def job_processes(mark):
    """The launcher's job: its workers inherit MARK."""
    return marked(f"MARK={mark}")


def run(launcher, script, mark, extra, timeout):
    """(exit code, output), or ("hung", output) when the launcher did not end within `timeout` s (it and every
    process of its job are then killed)."""
    env = {"PATH": VENV_BIN + ":/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "MARK": mark}
    try:
        p = subprocess.run(launcher + ["--standalone", "--nproc-per-node", "2", *extra, script], env=env,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        for pid in job_processes(mark):
            os.kill(pid, 9)
        return "hung", (e.output or b"").decode(errors="replace") if isinstance(e.output, bytes) else (e.output or "")
    return p.returncode, p.stdout + p.stderr


def outcome(code, out):
    """"ok", "teardown abort" (PyTorch's race at interpreter exit: pytorch/pytorch#190489, which strikes
    under either launcher by chance, mostly without destroy_process_group), or the exit code."""
    if code == 0:
        return "ok"
    if "terminate called without an active exception" in out:
        return "teardown abort"
    return code


def main():
    launchers = {"torchrun": [os.path.join(VENV_BIN, "torchrun")], "meshrun": [MESHRUN]}
    problems = []
    with tempfile.TemporaryDirectory() as work:
        runs = [(name, body, expected, []) for name, (body, expected) in SCENARIOS.items()]
        runs += [(name + ", --max-restarts 1", SCENARIOS[name][0], SCENARIOS[name][1], ["--max-restarts", "1"])
                 for name in RESTARTED]
        for i, (name, body, expected, extra) in enumerate(runs):
            script = os.path.join(work, f"s{i}.py")
            with open(script, "w") as f:
                f.write(PRELUDE + body)
            seen = {}
            for launcher, argv in launchers.items():
                mark = f"{launcher}-{i}-{os.getpid()}"
                # The reference is given less time: a torchrun that hangs (its restart under a loaded machine) is
                # reported below and says nothing of meshrun, whose own hang fails the test.
                code, out = run(argv, script, mark, extra, 120 if launcher == "torchrun" else 240)
                seen[launcher] = outcome(code, out)
                time.sleep(0.5)
                left = leftovers(mark)
                for pid in left:
                    os.kill(pid, 9)
                if launcher == "meshrun" and left:
                    problems.append(f"{name}: meshrun left {len(left)} process(es) of the job running")
                if launcher == "meshrun" and seen[launcher] == "teardown abort" and "pytorch/pytorch#190489" not in out:
                    problems.append(f"{name}: meshrun's summary does not name PyTorch's teardown abort")
            print(f"{name}: torchrun {seen['torchrun']}, meshrun {seen['meshrun']} (expected {expected})")
            # A teardown abort is PyTorch's, by chance: torchrun's is reported and tolerated; meshrun's only
            # where the script ends well and torchrun aborted on the same scenario in this run. Otherwise the
            # outcomes must agree (torchrun says 1 for every failure, meshrun the worker's code).
            meshrun_allowed = {expected}
            if expected == "ok" and seen["torchrun"] == "teardown abort":
                meshrun_allowed.add("teardown abort")
            if seen["meshrun"] not in meshrun_allowed:
                problems.append(f"{name}: meshrun's outcome is {seen['meshrun']}, expected {expected}"
                                + (" (torchrun did not abort here)" if seen["meshrun"] == "teardown abort" else ""))
            if seen["torchrun"] == "hung":
                print(f"  torchrun hung on '{name}' (killed after 120 s): the reference said nothing this time")
            torchrun_allowed = {expected, "teardown abort", "hung"}
            if seen["torchrun"] not in torchrun_allowed and not (expected != "ok" and seen["torchrun"] == 1):
                problems.append(f"{name}: torchrun's outcome is {seen['torchrun']}: the scenario is not what it says")
    for p in problems:
        print("FAILED:", p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
