"""PyTorch's own elastic agent (torchrun --rdzv-backend c10d) with meshrun-rendezvous as its store, side by
side with PyTorch's own TCPStore (hosted by the first agent) on the same jobs: two agents, one Gloo worker
each.
  ok       the job runs to its end: both agents exit 0, ranks 0 and 1 of 2, the all-reduce sums to 2
  fail     rank 1 exits 3, --max-restarts 0: both agents exit 1 (torchrun's code for a failed job)
  restart  the same failure with --max-restarts 1: both agents re-rendezvous and launch their workers
           again (each launch marks itself with its agent's pid). Not the attempt number: torch counts a
           restart only on an agent that saw its own worker fail first; one that saw the other node re-join
           first restarts its group keeping restart count 0. How the second launch ends is not compared:
           with torch 2.15 it succeeds, fails or hangs by chance on either store (docs/daemon.md,
           "torchrun's own agent").
Usage: torchrun_agent_test.py DAEMON VENV_BIN
"""
import os
import socket
import subprocess
import sys
import tempfile
import time

DAEMON, VENV_BIN = (os.path.abspath(a) for a in sys.argv[1:3])
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torchrun_agent_job.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def agents(endpoint, out, mode, restarts, run_id):
    env = {"PATH": VENV_BIN + ":/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
    argv = [os.path.join(VENV_BIN, "torchrun"), "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", endpoint, "--rdzv-id", run_id, "--max-restarts", str(restarts),
            "--monitor-interval", "0.5", JOB, out, "ok" if mode == "ok" else "fail"]
    # Each agent's output goes to a file, not a pipe: a worker its agent left behind (torch's agent may leave one
    # connecting to a store that died with the agent) would hold a pipe open, and reading it would never end.
    procs = []
    for i in range(2):
        with open(os.path.join(out, f"agent{i}.log"), "w") as log:
            procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT))
    return procs


def leftovers(out):
    """Processes of this scenario still running: their command line names its folder."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if out.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def finish(procs, timeout, out):
    codes, outputs = [], []
    for i, p in enumerate(procs):
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        codes.append(p.returncode)
        outputs.append(open(os.path.join(out, f"agent{i}.log")).read())
    for pid in leftovers(out):  # a worker its agent did not stop: the next scenario must not meet it
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    return codes, outputs


def scenario(store, endpoint, mode, work):
    out = tempfile.mkdtemp(dir=work)
    restarts = 1 if mode == "restart" else 0
    procs = agents(endpoint, out, mode, restarts, f"{mode}-{os.path.basename(out)}")
    if mode == "restart":  # wait for both agents' second launch, then stop (its end is torch's luck)
        def launches():
            names = [f.split(".") for f in os.listdir(out) if f.startswith("launch.")]
            return [sum(1 for n in names if n[1] == str(p.pid)) for p in procs]
        deadline = time.time() + 90
        while time.time() < deadline and min(launches()) < 2:
            if all(p.poll() is not None for p in procs):
                break
            time.sleep(0.2)
        counts = launches()
        for p in procs:
            p.terminate()
        _, outputs = finish(procs, 30, out)
        return counts, outputs
    codes, outputs = finish(procs, 120, out)
    return codes, outputs, sorted(f for f in os.listdir(out) if not f.startswith("agent")), out


def main():
    problems = []
    with tempfile.TemporaryDirectory() as work:
        port = free_port()
        daemon = subprocess.Popen([DAEMON, "--host", "127.0.0.1", "--port", str(port), "--log-level", "warn"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        daemon.stdout.readline()  # "listening on ..."
        try:
            stores = {"meshrun-rendezvous": f"127.0.0.1:{port}"}
            for store in ("meshrun-rendezvous", "torch TCPStore"):
                for mode in ("ok", "fail", "restart"):
                    # PyTorch's own store: the first agent hosts it on a fresh port each time.
                    endpoint = stores.get(store) or f"127.0.0.1:{free_port()}"
                    result = scenario(store, endpoint, mode, work)
                    if mode == "restart":
                        counts, outputs = result
                        print(f"{store}, restart: worker launches per agent {counts}")
                        if min(counts) < 2:
                            problems.append(f"{store}: not every agent launched its worker again (launches per "
                                            f"agent {counts}): " + " ||| ".join(o[-800:] for o in outputs))
                        continue
                    codes, outputs, files, out = result
                    print(f"{store}, {mode}: agents exited {codes}; files {files}")
                    expected = [0, 0] if mode == "ok" else [1, 1]
                    if codes != expected:
                        problems.append(f"{store}, {mode}: agents exited {codes}, expected {expected}: "
                                        + outputs[0][-600:])
                    if mode == "ok":
                        sums = [open(f"{out}/done.{r}.0").read() if os.path.exists(f"{out}/done.{r}.0") else ""
                                for r in (0, 1)]
                        if sums != ["2", "2"] or any(open(f"{out}/start.{r}.0").read() != "2" for r in (0, 1)):
                            problems.append(f"{store}, ok: ranks 0 and 1 of 2 did not both end ({files}, {sums})")
                    if mode == "fail" and not any("exitcode: 3" in o for o in outputs):
                        # PyTorch's store lives in the first agent: when that agent exits first, the other
                        # may die on the lost store before it prints its summary (seen in CI). Our daemon
                        # outlives the agents, so under it the summary must be there.
                        if store == "meshrun-rendezvous":
                            problems.append(f"{store}, fail: no agent reported the worker's exit code 3: "
                                            + " ||| ".join(o[-1500:] for o in outputs))
                        else:
                            print(f"{store}, fail: no agent printed exit code 3 (the store died with its host "
                                  "agent first)")
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
    for p in problems:
        print("FAILED:", p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
