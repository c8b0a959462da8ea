#!/usr/bin/env python3
"""Every meshrun command the README and docs/*.md show is checked against the programs, and run where it can.

    doc_commands_test.py --repo REPO --bin BUILD/bin --venv-bin REPO/.venv/bin

What counts as a command: each line of a fenced code block (continuations joined, `&&`, `;` and `|` split)
and each inline code span that starts with meshrun, meshrun-rendezvous or meshrun-trainer (bare or under
build/bin/). For each one:
  - every option it gives a program or a program's command must be one that program's --help lists (for
    meshrun: its own options up to the entrypoint, then the entrypoint's when that is meshrun-trainer);
  - every `--set KEY=...` of meshrun-trainer must be a key `meshrun-trainer --help-config` lists, and every
    `--config FILE` that names no placeholder must exist.
A command of a fenced block also runs, from a fresh folder that holds build/ and configs/ and a small DDP
script as train.py (the docs' "your script"), when it can run on one machine: no host but this one, every
file it names there, not a daemon that serves until stopped, not a synopsis (`[OPTIONS]`, `HOST`). Training
runs are cut to a few steps (`--set train.steps=N` appended). It must exit 0.
Links between the pages must reach a file, and a heading when they name one.
The test prints what it ran and what it only checked; it fails when any option, key, file or link is unknown,
or a command exits non-zero, naming the file and line of each.
"""
import argparse
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

PROGRAMS = ("meshrun", "meshrun-rendezvous", "meshrun-trainer")
COMMANDS = {"meshrun": ("run", "ping", "check"), "meshrun-rendezvous": ("status",), "meshrun-trainer": ("export",)}
STEPS_WHEN_RUN = 8
# Words that name a machine other than this one, or a placeholder the reader fills in.
OTHER_HOST = re.compile(r"\b(node\d|etcd\d|head-node|e\d:\d|fd00:|10\.0\.)")
PLACEHOLDER = re.compile(r"\b(HOST|PORT|ENTRYPOINT|OPTIONS|ARGS|NAME|DIR|FILE|ID|SESSION|CIDR|N|S)\b|\.\.\.|\[|\]")
TRAIN_PY = """\
# The docs' "your script": a small DDP job.
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    optimizer.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
dist.destroy_process_group()
"""

problems = []


def problem(where, message):
    problems.append(f"{where}: {message}")
    print(f"FAIL {where}: {message}")


class Help:
    """One program's (or command's) options from its --help: name -> takes a value."""

    def __init__(self, text):
        self.options = {}
        for line in text.splitlines():
            match = re.match(r"^  (-\S+)(?: (\S+))?", line)
            if not match:
                continue
            takes_value = bool(re.match(r"^[A-Z]+", match.group(2) or ""))  # TEXT, INT...; a flag has none
            for name in match.group(1).split(","):
                self.options[name] = takes_value


def run_help(binary, args):
    result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        sys.exit(f"`{binary} {' '.join(args)}` exited {result.returncode}: {result.stderr.strip()}")
    return result.stdout


def load_helps(bin_dir):
    helps = {}
    for program in PROGRAMS:
        binary = os.path.join(bin_dir, program)
        helps[(program, "")] = Help(run_help(binary, ["--help"]))
        for command in COMMANDS[program]:
            helps[(program, command)] = Help(run_help(binary, [command, "--help"]))
    keys = set()
    for line in run_help(os.path.join(bin_dir, "meshrun-trainer"), ["--help-config"]).splitlines():
        if re.match(r"^[a-z_]+\.[a-z_0-9.]+\s", line):
            keys.add(line.split()[0])
    return helps, keys


def commands_in(path):
    """(line number, text, fenced) for every command the file shows."""
    text = path.read_text()
    found = []
    for match in re.finditer(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M):
        first_line = text.count("\n", 0, match.start(1)) + 1
        lines = match.group(1).split("\n")
        index = 0
        while index < len(lines):
            line, number = lines[index], first_line + index
            while line.rstrip().endswith("\\") and index + 1 < len(lines):
                index += 1
                line = line.rstrip()[:-1] + " " + lines[index].strip()
            for part in re.split(r"&&|;|\|\|?", line):
                found.append((number, part.strip(), True))
            index += 1
    for match in re.finditer(r"(?<!`)`([^`\n]+)`(?!`)", text):
        found.append((text.count("\n", 0, match.start()) + 1, match.group(1).strip(), False))
    return [(n, t, fenced) for n, t, fenced in found if program_at(words_of(t)) is not None and not prose(t)]


def prose(text):
    """A sentence that starts with a program's name (a drawing's label, say), not a command: the word after
    the name is no option, command, path, script or placeholder."""
    words = words_of(text)
    if len(words) < 2:
        return False
    after = words[1].strip("[")
    return not (after.startswith("-") or after in COMMANDS[program_at(words)] or after.isupper() or "/" in after
                or after.endswith(".py") or after.startswith("__") or re.match(r"^[\w.:\[\]-]+$", after) and
                ":" in after)


def words_of(text):
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        words = text.split()
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        words = words[1:]  # VAR=value before the program
    return words


def program_at(words):
    if words and os.path.basename(words[0]) in PROGRAMS and (
            "/" not in words[0] or words[0].startswith(("build/bin/", "build-launcher/bin/"))):
        return os.path.basename(words[0])
    return None


def check_options(where, program, words, helps, keys):
    """Checks the options of `program` in `words` (after its name); returns the words after meshrun's entrypoint."""
    command = ""
    if words and words[0] in COMMANDS[program]:
        command, words = ("" if words[0] == "run" else words[0]), words[1:]
    known = helps[(program, command)].options
    index = 0
    while index < len(words):
        word = words[index].strip("[]")
        if word in ("--", "..."):
            index += 1
            if program == "meshrun" and not command and word == "--":
                return words[index:]
            continue
        if not word.startswith("-") or word == "-" or re.match(r"^-?\d", word):
            if program == "meshrun" and not command:
                return words[index:]  # the entrypoint and its arguments
            index += 1
            continue
        name, has_inline_value, value = word.partition("=")
        if name not in known:
            problem(where, f"`{program}{' ' + command if command else ''}` has no option {name} (its --help lists "
                           f"{len(known)}; a typo, or the docs drifted)")
            index += 1
            continue
        if known[name] and not has_inline_value:
            index += 1
            value = words[index] if index < len(words) else ""
        if program == "meshrun-trainer":
            check_trainer_value(where, name, value, keys)
        index += 1
    return []


def check_trainer_value(where, name, value, keys):
    if name == "--set":
        key = value.split("=", 1)[0]
        if "." in key and key not in keys:
            problem(where, f"meshrun-trainer has no config key {key} (meshrun-trainer --help-config lists them)")
    if name == "--config" and value and not PLACEHOLDER.search(value) and not os.path.exists(value):
        problem(where, f"--config {value}: no such file in the repository")


def check_command(where, words, helps, keys):
    program = program_at(words)
    rest = check_options(where, program, words[1:], helps, keys)
    if rest and os.path.basename(rest[0]) == "meshrun-trainer":
        check_options(where, "meshrun-trainer", rest[1:], helps, keys)


def runnable(text, words, run_dir):
    """Why the command cannot run on this machine, or None."""
    if PLACEHOLDER.search(text):
        return "a synopsis"
    if OTHER_HOST.search(text) or "--hostfile" in words:
        return "it names other hosts"
    program, rest = program_at(words), words[1:]
    if program == "meshrun-rendezvous" and (not rest or rest[0] != "status"):
        return "a daemon that serves until stopped"
    if program == "meshrun" and rest and rest[0] in ("ping", "check"):
        return "it asks a daemon on another host"
    for word in rest:
        path = word.split("=", 1)[1].strip("'\"") if re.match(r"^[a-z_.]+=", word) else word
        if ("/" in path or path.endswith((".py", ".json", ".bin", ".safetensors"))) and not path.startswith("-"):
            if not glob.glob(os.path.join(run_dir, path)):
                return f"it needs {path}"
    return None


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def check_links(repo, files):
    """Every link from one page to another (or to a heading) reaches a file and, when it names one, a heading."""
    anchors = {}
    for path in files:
        text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
        anchors[path.resolve()] = {slug(h) for h in re.findall(r"^#+ (.*)$", text, re.M)} | set(
            re.findall(r'<a id="([^"]+)">', text))
    for path in files:
        text = path.read_text()
        for match in re.finditer(r"\]\(([^)\s]+)\)", text):
            target = match.group(1)
            if re.match(r"^[a-z]+:", target):
                continue  # http(s), mailto
            where = f"{path.relative_to(repo)}:{text.count(chr(10), 0, match.start()) + 1}"
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path.resolve()
            if not linked.exists():
                problem(where, f"the link {target} reaches no file")
            elif anchor and linked.suffix == ".md" and anchor not in anchors.get(linked, set()):
                problem(where, f"the link {target} reaches no heading of {linked.name}")


def run_command(where, words, run_dir, env):
    if "meshrun-trainer" in (os.path.basename(w) for w in words):
        words = [*words, "--set", f"train.steps={STEPS_WHEN_RUN}"]
    print(f"RUN  {where}: {shlex.join(words)}", flush=True)
    result = subprocess.run(words, cwd=run_dir, env=env, capture_output=True, text=True, errors="replace", timeout=600)
    if result.returncode != 0:
        print(result.stdout[-4000:], result.stderr[-4000:])
        problem(where, f"`{shlex.join(words)}` exited {result.returncode}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    parser.add_argument("--bin", required=True)
    parser.add_argument("--venv-bin", required=True)
    args = parser.parse_args()
    repo = Path(args.repo)
    os.chdir(repo)  # --config paths are the repository's
    helps, keys = load_helps(args.bin)
    if len(keys) < 20:
        sys.exit(f"meshrun-trainer --help-config listed {len(keys)} keys: has its format changed?")
    files = [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]
    check_links(repo, files)
    checked, ran, seen = 0, 0, set()
    with tempfile.TemporaryDirectory() as run_dir:
        os.symlink(os.path.dirname(os.path.abspath(args.bin)), os.path.join(run_dir, "build"))
        os.symlink(repo / "configs", os.path.join(run_dir, "configs"))
        Path(run_dir, "train.py").write_text(TRAIN_PY)
        env = dict(os.environ, PATH=f"{os.path.abspath(args.bin)}:{os.path.abspath(args.venv_bin)}:{os.environ.get('PATH', '')}")
        for path in files:
            for number, text, fenced in commands_in(path):
                where = f"{path.relative_to(repo)}:{number}"
                words = words_of(text)
                check_command(where, words, helps, keys)
                checked += 1
                key = tuple(words)
                if not fenced or key in seen:
                    continue
                seen.add(key)
                why_not = runnable(text, words, run_dir)
                if why_not:
                    print(f"ONLY CHECKED {where}: {text}  ({why_not})")
                    continue
                run_command(where, words, run_dir, env)
                ran += 1
    print(f"{checked} commands checked against the programs' --help, {ran} run")
    if ran < 3:
        problem("docs", f"only {ran} commands could run: the main job and the quickstart examples should")
    if problems:
        print(f"{len(problems)} problem(s):\n  " + "\n  ".join(problems))
        return 1
    print("PASS: every command the docs show exists as written, and those that can run here ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
