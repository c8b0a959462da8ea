"""What clang-tidy last found clean, so that lint.tidy checks only translation units whose inputs changed.

A translation unit's key is a SHA-256 over everything clang-tidy reads for it: clang-tidy's version line, the
repository's .clang-tidy, the unit's compile command, and the path and content of every file the compiler read
for it (ninja's dependency log: the source, our headers, the system's and LibTorch's). Paths inside the
repository and the build folder are written relative to them, so that a clone elsewhere computes the same
keys. A unit that was never compiled (no dependency entry) has no key and is always checked.

    tidy_record.py keys BUILD ROOT FILE...        prints "FILE KEY" per file (KEY "-": none)

tests/tidy_clean.txt holds the keys of the units found clean (scripts/tidy.sh --record writes it).
"""
import hashlib
import json
import os
import shlex
import subprocess
import sys


def file_digest(path, cache):
    if path not in cache:
        h = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            cache[path] = h.hexdigest()
        except OSError:
            cache[path] = "missing"
    return cache[path]


def dependency_log(build):
    """Object (relative to BUILD) -> the files the compiler read for it (absolute paths)."""
    text = subprocess.run(["ninja", "-C", build, "-t", "deps"], capture_output=True, text=True, check=True).stdout
    deps, current = {}, None
    for line in text.splitlines():
        if line and not line[0].isspace():
            current = line.split(":", 1)[0] if "(VALID)" in line else None
            if current:
                deps[current] = []
        elif current and line.strip():
            deps[current].append(os.path.normpath(os.path.join(build, line.strip())))
    return deps


def main():
    if len(sys.argv) < 4 or sys.argv[1] != "keys":
        sys.exit("usage: tidy_record.py keys BUILD ROOT FILE...")
    build, root, files = os.path.realpath(sys.argv[2]), os.path.realpath(sys.argv[3]), sys.argv[4:]

    def portable(text):  # this clone's paths written relative to it
        return text.replace(build, "<build>").replace(root, "<root>")

    # The version line alone: the rest names this machine's CPU, which does not change what clang-tidy finds.
    version = subprocess.run(["clang-tidy", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    head = hashlib.sha256((version + open(os.path.join(root, ".clang-tidy")).read()).encode()).hexdigest()
    commands = {os.path.realpath(os.path.join(e["directory"], e["file"])): e["command"]
                for e in json.load(open(os.path.join(build, "compile_commands.json")))}
    deps, cache = dependency_log(build), {}
    for name in files:
        path = os.path.realpath(os.path.join(root, name))
        command = commands.get(path)
        args = shlex.split(command) if command else []
        obj = args[args.index("-o") + 1] if "-o" in args else None
        read = deps.get(obj) if obj else None
        if not read:
            print(name, "-")
            continue
        h = hashlib.sha256((head + portable(command)).encode())
        for shown, dep in sorted((portable(dep), dep) for dep in read):  # the order a clone anywhere sees
            h.update(f"{shown} {file_digest(dep, cache)}\n".encode())
        print(name, h.hexdigest())


if __name__ == "__main__":
    main()
