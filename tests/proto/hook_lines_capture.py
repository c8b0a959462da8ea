"""The lines meshrun's Python hook (launcher/hang/python/_meshrun_hook.py) writes and reads, for fixed inputs.

Usage: hook_lines_capture.py FIXTURE (--check | --write)

--write stores them in FIXTURE (tests/proto/hook_lines.txt: "NAME<TAB>LINE" per line), which the C++ test
test_hook_messages.cpp parses with proto/hook_messages (the agent's parser) and checks field by field, and
whose request lines it checks proto's formatter writes byte for byte. --check produces them again from the
hook as it is now and fails on any difference, and checks that the hook reads each request line as the agent
means it: so the Python and C++ sides of the wire cannot drift apart unnoticed.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "launcher", "hang", "python"))
import _meshrun_hook as hook  # noqa: E402  (nothing in it runs at import: start() does)

# The inputs; test_hook_messages.cpp expects the same values.
FRAMES = ["/job/train.py:14 in save", "/usr/lib/python3.11/threading.py:320 in wait"]
MESSAGES = [
    ("hello", hook._hello_line(4242, True)),
    ("hello_off", hook._hello_line(4242, False)),
    ("status", hook._status_line([("0", 12, 11), ("pg:with:colons", 3, 3)])),
    ("status_empty", hook._status_line([])),
    ("clock", hook._clock_line(1700000000000000000, 1700000000000123456)),
    ("arrivals", hook._arrivals_line(5, 9, 5, 1700000000000000000, 2000000, "group with spaces")),
    ("frames", hook._frames_line(FRAMES, "save at train.py:14")),
    ("dumped", hook._dumped_line("/tmp/meshrun-progress-x/dump 0.json")),
    ("failed", hook._failed_line("OSError: [Errno 28] No space left on device")),
]
# The agent's requests as proto formats them, and what the hook must read in each.
REQUESTS = [
    ("request_dump", "dump /tmp/meshrun-progress-x/dump 0.json", ("dump", "/tmp/meshrun-progress-x/dump 0.json")),
    ("request_clock", "clock 1700000000000000000", ("clock", 1700000000000000000)),
    ("request_arrivals", "arrivals 5 9 group with spaces", ("arrivals", 5, 9, "group with spaces")),
    ("request_frames", "frames", ("frames",)),
]
HEADER = [
    "# The lines meshrun's Python hook writes (fr ...) and reads (requests), for the inputs of",
    "# tests/proto/hook_lines_capture.py, which writes this file and checks it against the hook; test_hook_messages.cpp",
    "# parses them with proto/hook_messages. NAME<TAB>LINE.",
]


def produced():
    return HEADER + [f"{name}\t{line}" for name, line in MESSAGES] + [f"{name}\t{line}" for name, line, _ in REQUESTS]


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("--check", "--write"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    fixture = sys.argv[1]
    lines = produced()
    if sys.argv[2] == "--write":
        with open(fixture, "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"wrote {len(MESSAGES) + len(REQUESTS)} lines to {fixture}")
        return 0
    problems = []
    with open(fixture) as f:
        stored = f.read().splitlines()
    for ours, theirs in zip(lines, stored):
        if ours != theirs:
            problems.append(f"the hook now writes\n    {ours!r}\n  where {fixture} has\n    {theirs!r}")
    if len(lines) != len(stored):
        problems.append(f"the hook gives {len(lines)} lines, {fixture} has {len(stored)}")
    for name, line, expected in REQUESTS:
        read = hook._parse_request(line)
        if read != expected:
            problems.append(f"{name}: the hook reads {line!r} as {read!r}, the agent means {expected!r}")
    if hook._parse_request("clock soon") is not None or hook._parse_request("arrivals 5 x") is not None:
        problems.append("the hook takes a malformed request for one")
    for p in problems:
        print("FAILED:", p)
    if problems:
        print(f"(rewrite the fixture with --write only if the wire changed on both sides: proto/worker/hook_messages.cpp)")
        return 1
    print(f"the hook writes and reads the {len(MESSAGES) + len(REQUESTS)} lines of {fixture}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
