"""The figures behind bench/faults/progress.sh: beat overhead, hang detection latency, straggler detection."""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

BEAT = b"step=123456 loss=2.3125 tokens_per_s=51200 compute_s=0.0931"


def beat_cost_us(n=200_000):
    """Mean cost of one beat (a nonblocking sendto) with an agent-like reader draining the socket."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "0.sock")
        agent = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        agent.bind(path)
        agent.settimeout(0.05)
        done = threading.Event()

        def drain():
            while not done.is_set():
                try:
                    agent.recv(512)
                except (socket.timeout, OSError):
                    pass

        reader = threading.Thread(target=drain)
        reader.start()
        worker = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                try:
                    worker.sendto(BEAT, path)
                except OSError:
                    pass  # queue full: dropped, as a real worker would
            runs.append((time.perf_counter() - t0) / n * 1e6)
        done.set()
        reader.join()
        return statistics.median(runs)


def stream(proc, sink, stamps, marker):
    """Copies proc's output into sink, stamping when a line containing marker first appears."""
    for line in proc.stdout:
        sink.append(line)
        if marker in line and "hung" not in stamps:
            stamps["hung"] = time.time()


def hang_latency(meshrun, job, step_s, floor_s):
    """Blocks rank 0 at step 30 of a 2-rank Gloo job; returns (latency from the block to the named hang, budget)."""
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, PROGRESS_JOB_OUT=out)
        argv = [meshrun, "--standalone", "--nproc-per-node", "2", "--hang-floor", str(floor_s), "--shutdown-timeout",
                "2", job, "100000", str(step_s), "--block-rank", "0", "--block-at", "30"]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines, stamps = [], {}
        reader = threading.Thread(target=stream, args=(proc, lines, stamps, "suspected hang:"))
        reader.start()
        proc.wait(timeout=300)
        reader.join()
        blocked = float(open(os.path.join(out, "blocked.0")).read())
        if "hung" not in stamps:
            sys.exit("no hang named:\n" + "".join(lines))
        return stamps["hung"] - blocked, floor_s + 2 * step_s


def torchrun_hang(torchrun, job, wait_s):
    """The same hung job under torchrun: is anything named within wait_s?"""
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, PROGRESS_JOB_OUT=out)
        argv = [torchrun, "--standalone", "--nproc-per-node", "2", job, "100000", "0.05", "--block-rank", "0",
                "--block-at", "30"]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout))
        reader.start()
        time.sleep(wait_s)
        still_running = proc.poll() is None
        proc.terminate()  # torchrun stops its workers (their own sessions) on SIGTERM
        proc.wait(timeout=60)
        reader.join(timeout=60)
        return still_running, "hung" in "".join(lines).lower()


def straggler_named(meshrun, daemon, job, factor):
    """(the named rank's status entry, seconds since the job's start) once the daemon names a rank computing
    `factor` x longer a straggler; None if it names none within 120 s."""
    with tempfile.TemporaryDirectory() as out:
        d = subprocess.Popen([daemon, "--host", "127.0.0.1", "--port", "0", "--log-level", "warn"],
                             stdout=subprocess.PIPE, text=True)
        endpoint = d.stdout.readline().split("listening on ")[1].strip()
        env = dict(os.environ, PROGRESS_JOB_OUT=out)
        argv = [meshrun, "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                "--rdzv-id", "straggler", job, "100000", "0.05", "--slow-rank", "1", "--slow-factor", str(factor)]
        job_proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        named, t0 = None, time.time()
        while named is None and time.time() - t0 < 120:
            status = json.loads(subprocess.run([daemon, "status", "--endpoint", endpoint, "--json"],
                                               capture_output=True, text=True).stdout)
            for run in status.get("runs", []):
                for node in run.get("nodes", []):
                    for r in node.get("ranks", []):
                        if r.get("straggler"):
                            named = r
            time.sleep(0.1)
        job_proc.terminate()
        job_proc.wait(timeout=60)
        d.terminate()
        d.wait(timeout=30)
        return (named, time.time() - t0) if named else None


def watch_stragglers(meshrun, daemon, job_argv, seconds, stop_when_named):
    """Runs one meshrun (2 ranks) on a fresh daemon, polling status: (seconds until a rank was first flagged
    or None, the flagged rank's entry, polls, polls that flagged a rank, whether the job ended by itself)."""
    d = subprocess.Popen([daemon, "--host", "127.0.0.1", "--port", "0", "--log-level", "warn"],
                         stdout=subprocess.PIPE, text=True)
    endpoint = d.stdout.readline().split("listening on ")[1].strip()
    argv = [meshrun, "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
            "--rdzv-id", "arrivals", *job_argv]
    job_proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first, entry, polls, flagged, t0 = None, None, 0, 0, time.time()
    while time.time() - t0 < seconds and job_proc.poll() is None:
        status = json.loads(subprocess.run([daemon, "status", "--endpoint", endpoint, "--json"],
                                           capture_output=True, text=True).stdout or "{}")
        slow = [r for run in status.get("runs", []) for n in run.get("nodes", []) for r in n.get("ranks", [])
                if r.get("straggler")]
        polls += 1
        if slow:
            flagged += 1
            if first is None:
                first, entry = time.time() - t0, slow[0]
                if stop_when_named:
                    break
        time.sleep(0.2)
    ended = job_proc.poll() is not None
    job_proc.terminate()
    job_proc.wait(timeout=60)
    d.terminate()
    d.wait(timeout=30)
    return first, entry, polls, flagged, ended


def straggler_arrivals(meshrun, daemon, arrival_job):
    """A script with no beats: a 1.5x slow rank named from arrival times, and a healthy run that names none."""
    with tempfile.TemporaryDirectory() as out:
        # 40 ms of compute per step (two collectives), rank 1 at 1.5x: steps of 60 ms.
        first, entry, _, _, _ = watch_stragglers(meshrun, daemon, [arrival_job, out, "100000", "40", "1", "1.5"],
                                                 120, True)
        if first is None:
            sys.exit("straggler from arrival times: a 1.5x slow rank was not named within 120 s")
        steps = entry["collectives"]["0"] // 2
        print(f"straggler without beats: a 1.5x slow rank (rank {entry['rank']}) named {first:.1f} s after the "
              f"start, at about step {steps}; its figure {entry['arrival_compute_s'] * 1e3:.1f} ms of compute per "
              "collective (expected 30 ms against 20 ms)")
    with tempfile.TemporaryDirectory() as out:
        _, _, polls, flagged, ended = watch_stragglers(meshrun, daemon, [arrival_job, out, "300", "40"], 180, False)
        print(f"healthy without beats, 300 steps of 40 ms: {flagged} of {polls} status polls flagged a straggler "
              f"(goal: 0); the job ended by itself: {ended}")


def main():
    p = argparse.ArgumentParser()
    for flag in ("--meshrun", "--daemon", "--torchrun", "--job", "--arrival-job"):
        p.add_argument(flag, required=True)
    a = p.parse_args()
    # The workers' python is the venv's (torch), as for torchrun.
    os.environ["PATH"] = os.path.dirname(os.path.abspath(a.torchrun)) + os.pathsep + os.environ.get("PATH", "")
    us = beat_cost_us()
    print(f"beat: {us:.2f} us per beat (nonblocking sendto, agent draining); "
          f"{us / 1e5 * 100:.4f} % of a 100 ms step (goal < 0.1 %)")
    for step_s in (0.05, 0.2):
        latency, budget = hang_latency(a.meshrun, a.job, step_s, floor_s=3)
        print(f"hang: steps of {step_s} s, floor 3 s: named {latency:.2f} s after the rank blocked; budget "
              f"2 x median + floor = {budget:.2f} s; latency / budget = {latency / budget:.2f} "
              f"(goal: within the budget plus the 0.25 s check interval)")
    running, named = torchrun_hang(a.torchrun, a.job, 20)
    print(f"hang under torchrun: after 20 s still running = {running}, a hung rank named = {named} "
          "(it waits for the collective's timeout: 30 min by default for Gloo and NCCL)")
    found = straggler_named(a.meshrun, a.daemon, a.job, 1.5)
    if found is None:
        sys.exit("straggler: a 1.5x slow rank was not named within 120 s")
    r, seconds = found
    print(f"straggler: a 1.5x slow rank (slow from its first step) named {seconds:.1f} s after the job's start, at "
          f"its step {r['step']} (goal: within 10 s); compute {r['compute_s']:.3f} s per step")
    straggler_arrivals(a.meshrun, a.daemon, a.arrival_job)


if __name__ == "__main__":
    main()
