"""The workers' environment under meshrun, diffed against torchrun's for the same command line.

For each mode (one node, --standalone, two nodes on a c10d endpoint, --nnodes MIN:MAX, -m module,
--no-python, --signals-to-handle, --max-restarts 1: standby workers and the quick exit on), both launchers run a worker that dumps its environment; the parent's environment is fixed
(env -i), so every variable a worker has beyond it was set by the launcher. Then, per rank:
  - every variable torchrun sets, meshrun sets too;
  - a variable only meshrun sets is on the list of deliberate additions in docs/launcher.md;
  - values agree, except run-specific ones (ports, ids, paths of this attempt) and the value differences
    docs/launcher.md lists with their reason.
The lists are read from the docs, so the docs and the behaviour cannot drift apart.
Usage: env_parity_test.py MESHRUN VENV_BIN DOCS_LAUNCHER_MD
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile

MESHRUN, VENV_BIN, DOCS = (os.path.abspath(a) for a in sys.argv[1:4])
RUN_SPECIFIC = {"MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE"}
DUMP = """import json, os, sys
with open(os.path.join(sys.argv[1], os.environ["RANK"] + ".json"), "w") as f:
    json.dump(dict(os.environ), f)
"""


def documented():
    """(added, differs): the variables docs/launcher.md lists as meshrun's own, and as deliberately valued
    otherwise, from the rows of its two tables under "Differences from torchrun"."""
    text = open(DOCS).read()
    section = text.split("### Differences from torchrun's environment", 1)[1].split("\n## ", 1)[0]
    added, differs, table = set(), set(), None
    for line in section.splitlines():
        if line.startswith("Added by meshrun"):
            table = added
        elif line.startswith("Set otherwise than by torchrun"):
            table = differs
        elif line.startswith("| `") and table is not None:
            table.update(re.findall(r"`([A-Z_][A-Z0-9_]*)`", line.split("|")[1]))
    return added, differs


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(argvs, cwd):
    """Runs the agents of one job (one argv per node) side by side; fails the test if one fails."""
    env = {"PATH": VENV_BIN + ":/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8"}
    procs = [subprocess.Popen(a, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for a in argvs]
    for p, a in zip(procs, argvs):
        out, _ = p.communicate(timeout=180)
        if p.returncode != 0:
            sys.exit(f"FAILED: {' '.join(a)} exited {p.returncode}:\n{out}")
    return env


def modes(port):
    two = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
           f"127.0.0.1:{port}", "--rdzv-id", "parity"]
    elastic = ["--nnodes", "1:2", "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
               f"127.0.0.1:{port}", "--rdzv-id", "parity", "--rdzv-conf", "last_call_timeout=1"]
    single = ["--nproc-per-node", "2", "--master-port", str(port)]
    return {
        "one node": [single + ["dump.py", "OUT"]],
        "standalone": [["--standalone", "--nproc-per-node", "2", "dump.py", "OUT"]],
        "two nodes": [two + ["dump.py", "OUT"], two + ["dump.py", "OUT"]],
        "MIN:MAX": [elastic + ["dump.py", "OUT"]],
        "module": [single + ["-m", "dump", "OUT"]],
        "no-python": [single + ["--no-python", os.path.join(VENV_BIN, "python"), "dump.py", "OUT"]],
        "signals": [single + ["--signals-to-handle", "SIGTERM,SIGUSR1", "dump.py", "OUT"]],
        # A job that may restart: meshrun's standby workers and quick exit are on.
        "restarts": [single + ["--max-restarts", "1", "dump.py", "OUT"]],
    }


def run_mode(launcher, argvs, work, name):
    out = os.path.join(work, name)
    os.makedirs(out)
    parent = launch([[launcher] + [out if a == "OUT" else a for a in argv] for argv in argvs], work)
    dumps = {}
    for f in sorted(os.listdir(out)):
        dumps[int(f.split(".")[0])] = json.load(open(os.path.join(out, f)))
    return parent, dumps


def compare(mode, torch_run, mesh_run, added, differs):
    (parent, theirs), (_, ours) = torch_run, mesh_run
    problems = []
    if sorted(theirs) != sorted(ours):
        return [f"{mode}: ranks {sorted(theirs)} under torchrun, {sorted(ours)} under meshrun"]
    for rank in sorted(theirs):
        t = {k: v for k, v in theirs[rank].items() if parent.get(k) != v}
        m = {k: v for k, v in ours[rank].items() if parent.get(k) != v}
        for k in sorted(set(t) - set(m)):
            problems.append(f"{mode}, rank {rank}: torchrun sets {k}={t[k]!r}, meshrun does not")
        for k in sorted(set(m) - set(t) - added):
            problems.append(f"{mode}, rank {rank}: meshrun sets {k}={m[k]!r}, torchrun does not, and "
                            "docs/launcher.md does not list it as deliberate")
        for k in sorted(set(t) & set(m) - RUN_SPECIFIC - differs):
            if t[k] != m[k]:
                problems.append(f"{mode}, rank {rank}: {k} is {t[k]!r} under torchrun, {m[k]!r} under meshrun")
    return problems


def main():
    added, differs = documented()
    if not added or not differs:
        sys.exit("FAILED: docs/launcher.md has no lists of deliberate environment differences")
    print(f"deliberate: added {sorted(added)}; valued otherwise {sorted(differs)}")
    problems = []
    with tempfile.TemporaryDirectory() as work:
        open(os.path.join(work, "dump.py"), "w").write(DUMP)
        for mode, argvs in modes(free_port()).items():
            torch_run = run_mode(os.path.join(VENV_BIN, "torchrun"), argvs, work, "torchrun-" + mode)
            argvs = modes(free_port())[mode]
            mesh_run = run_mode(MESHRUN, argvs, work, "meshrun-" + mode)
            found = compare(mode, torch_run, mesh_run, added, differs)
            print(f"{mode}: {len(torch_run[1])} ranks, {len(found)} difference(s)")
            problems += found
    for p in problems:
        print("FAILED:", p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
