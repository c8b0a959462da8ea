"""Weighs the suite's tests for ctest's scheduler (docs/testing.md, "Side by side"): runs every test that
add_test() registers (not the Catch2 cases, weighed per binary in their CMakeLists) a few side by side, measures its
wall time and the CPU time of its whole process tree, and writes tests/test_weights.txt:

    NAME SLOTS COST

SLOTS is the test's PROCESSORS in quarter-cores (the suite runs with ctest -j 10: ten quarter-cores, 2.5 cores'
worth of tests on two, most of which wait), from its CPU time over its wall time; COST is its wall time in seconds,
which ctest uses to start the longest tests first. Run it after adding or changing a test (about 30 minutes on two
cores), and commit the table:

    .venv/bin/python tests/weigh_tests.py build [-j 3] [-R REGEX]
"""
import argparse
import concurrent.futures
import json
import os
import re
import resource
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TABLE = os.path.join(HERE, "test_weights.txt")
QUARTERS_PER_CORE = 4
# ctest starts a test only when its slots are free, and fills the rest with smaller tests first: one that asks for
# more than half of the ten waits until the suite's very end (a tree's build did, 300 s alone at the tail).
MAX_SLOTS = 5
# Tests that build a tree of their own take minutes when ccache misses (a new flag, a header every unit includes),
# seconds when it hits: they count as long whatever this machine's cache held when weighed, so they start early.
BUILDS = re.compile(r"build_|_build$|^lint\.tidy$")
COLD_BUILD_COST = 240


def registered(build):
    listing = json.loads(subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"], check=True,
                                        capture_output=True, text=True).stdout)
    out = []
    for t in listing["tests"]:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        env = dict(os.environ)
        for item in props.get("ENVIRONMENT", []):
            key, _, value = item.partition("=")
            env[key] = value
        out.append((t["name"], t["command"], props.get("WORKING_DIRECTORY", build), env))
    return out


def catch_case(command):
    """A Catch2 case from catch_discover_tests: its binary is run with the case's name (weighed per binary)."""
    return len(command) >= 2 and not command[1].startswith("-") and os.path.basename(command[0]).startswith("test_") \
        and not command[0].endswith((".sh", ".py"))


def weigh(test):
    name, command, cwd, env = test
    start = time.monotonic()
    # A child of its own measures its children: RUSAGE_CHILDREN counts the whole tree it reaped.
    probe = ("import json, resource, subprocess, sys\n"
             "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode\n"
             "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
             "print(json.dumps([rc, u.ru_utime + u.ru_stime]))")
    done = subprocess.run([sys.executable, "-c", probe] + command, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    rc, cpu = json.loads(done.stdout.strip().splitlines()[-1])
    return name, rc, cpu, wall


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build")
    parser.add_argument("-j", type=int, default=3, help="tests side by side while weighing")
    parser.add_argument("-R", default="", help="only the tests whose names match (the table keeps the others)")
    args = parser.parse_args()
    tests = [t for t in registered(os.path.abspath(args.build))
             if not catch_case(t[1]) and not t[0].startswith("lint.") and re.search(args.R, t[0])]
    weights = {}
    if os.path.exists(TABLE):
        for line in open(TABLE):
            if line.strip() and not line.startswith("#"):
                name, slots, cost = line.rsplit(None, 2)
                weights[name] = (int(slots), int(cost))
    lock = threading.Lock()

    def one(test):
        name, rc, cpu, wall = weigh(test)
        slots = max(1, min(MAX_SLOTS, round(QUARTERS_PER_CORE * cpu / max(wall, 0.1))))
        with lock:
            cost = max(1, round(wall))
            weights[name] = (slots, max(cost, COLD_BUILD_COST) if BUILDS.search(name) else cost)
            print(f"{name}: exit {rc}, {cpu:.0f} CPU s in {wall:.0f} s -> {slots} slots", flush=True)

    with concurrent.futures.ThreadPoolExecutor(args.j) as pool:
        list(pool.map(one, tests))
    with open(TABLE, "w") as f:
        f.write("# Written by tests/weigh_tests.py: NAME SLOTS COST. SLOTS: the test's PROCESSORS in quarter-cores (ctest\n"
                "# -j 10), from its CPU over its wall time; COST: its wall time in seconds (the longest start first).\n")
        for name in sorted(weights):
            f.write(f"{name} {weights[name][0]} {weights[name][1]}\n")


if __name__ == "__main__":
    main()
