#!/usr/bin/env bash
# Does a PyTorch Gloo script that calls destroy_process_group() right after its last all_reduce end
# cleanly? RUNS jobs of 2 ranks per launcher and script variant, interleaved (torchrun, meshrun, meshrun
# with --hang-timeout off: no startup hook), each job judged failed when it exits non-zero or a rank prints
# "terminate called". Prints the failure rate with its 95 % Wilson interval per cell. Not part of ctest.
#   bench/control/teardown.sh             (env RUNS=20, VARIANTS="plain mesh nodestroy")
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
exec "$here/.venv/bin/python" - "$here" "${RUNS:-20}" "${VARIANTS:-plain mesh nodestroy}" << 'PY'
import math, os, subprocess, sys, tempfile

here, runs, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
venv = os.path.join(here, ".venv", "bin")
job = os.path.join(here, "bench", "control", "teardown_job.py")
launchers = {
    "torchrun": [os.path.join(venv, "torchrun"), "--standalone", "--nproc-per-node", "2"],
    "meshrun": [os.path.join(here, "build", "bin", "meshrun"), "--standalone", "--nproc-per-node", "2"],
    "meshrun, no hook": [os.path.join(here, "build", "bin", "meshrun"), "--standalone", "--nproc-per-node", "2",
                         "--hang-timeout", "off"],
}
env = dict(os.environ, PATH=venv + os.pathsep + os.environ["PATH"])


def wilson(k, n, z=1.96):
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


failed = {(l, v): 0 for l in launchers for v in variants}
examples = {}
for i in range(runs):
    for v in variants:
        for name, argv in launchers.items():
            p = subprocess.run(argv + [job, v], env=env, capture_output=True, text=True, timeout=300)
            out = p.stdout + p.stderr
            if p.returncode != 0 or "terminate called" in out:
                failed[(name, v)] += 1
                examples.setdefault((name, v), f"exit {p.returncode}: " + " | ".join(
                    l for l in out.splitlines() if "terminate" in l or "rror" in l)[:300])
print(f"{runs} jobs of 2 ranks per cell; failed = non-zero exit or 'terminate called' on any rank")
for (name, v), k in failed.items():
    lo, hi = wilson(k, runs)
    print(f"  {v:6} {name:17} {k:3}/{runs} failed: {100 * k / runs:5.1f} % (95 % CI {100 * lo:.1f}-{100 * hi:.1f} %)")
for key, text in examples.items():
    print(f"  e.g. {key[1]} under {key[0]}: {text}")
PY
