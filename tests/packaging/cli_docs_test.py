#!/usr/bin/env python3
"""The man pages and the bash/zsh completions the build generated still match each program's --help.

    cli_docs_test.py --share BUILD/packaging/share --version 0.1.0 meshrun=PATH meshrun-rendezvous=PATH ...

For every program: the options of `PROGRAM --help` and of each command's `PROGRAM COMMAND --help` (read here
with a parser of its own, not packaging/cli_docs.py's) must all be in the man page, in the bash completion
and in the zsh completion; every option those two completion files offer must exist in some --help (nothing
stale); each command has its section and is completed; meshrun's hidden __orphan-watchdog is nowhere. The
page must render without groff warnings and carry the project version. The bash completion is also run:
sourced into bash, it must offer exactly each command's options, the commands, and an option's choices.
The zsh completion must parse (zsh -n). Exits non-zero on the first program with a problem, listing them all.
"""
import argparse
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HIDDEN = "__orphan-watchdog"
problems = []


def check(ok, message):
    if not ok:
        problems.append(message)
        print(f"FAIL {message}")
    return ok


def run(args, **kwargs):
    return subprocess.run(args, capture_output=True, text=True, timeout=60, **kwargs)


def help_flags(text):
    """Option names of a CLI11 help: two-space-indented entry lines in the Options: section and in every
    group of options (a "Title:" line of its own, as CLI11 prints a group)."""
    flags, in_options = [], False
    for line in text.splitlines():
        if line.strip() == "Options:" or (re.match(r"^\S.*:$", line) and line not in ("Positionals:", "Subcommands:")):
            in_options = True
        elif not line.strip():
            in_options = False
        elif in_options and re.match(r"^  -", line):
            flags += line.split()[0].split(",")
    return flags


def commands_of(program, text):
    """CLI11 subcommands ("Subcommands:" entries) and the `PROGRAM WORD` the help text quotes."""
    names, in_section = [], False
    for line in text.splitlines():
        if line.strip() == "Subcommands:":
            in_section = True
        elif not line.strip():
            in_section = False
        elif in_section and re.match(r"^  \S", line):
            names.append(line.split()[0])
    for match in re.finditer(r"`" + re.escape(program) + r" ([a-z][a-z0-9-]*)", text):
        if match.group(1) not in names:
            names.append(match.group(1))
    return names


def bash_complete(completion_file, program, words):
    """COMPREPLY of the generated bash function for the command line `words` (the last one is completed)."""
    script = f"""
source {completion_file!s}
COMP_WORDS=({' '.join(repr(w) for w in [program, *words])})
COMP_CWORD={len(words)}
func=$(complete -p {program} | sed -E 's/.*-F ([^ ]+) .*/\\1/')
"$func"
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    with tempfile.TemporaryDirectory() as empty:  # no file names to mix into the answers
        result = run(["bash", "--norc", "--noprofile", "-c", script], cwd=empty)
    check(result.returncode == 0, f"{program}: bash completion of {words} failed: {result.stderr.strip()}")
    return set(result.stdout.split())


def completion_flags_bash(text):
    flags = set()
    for match in re.finditer(r"^\s+\[[^\]]+\]='([^']*)'", text, re.MULTILINE):
        flags.update(w for w in match.group(1).split() if w.startswith("-"))
    return flags


def completion_flags_zsh(text):
    flags = set()
    for line in text.splitlines():
        if not re.match(r"^\s+('\(|'\*'|-)", line):
            continue
        line = re.sub(r"\[(?:\\.|[^\]\\])*\]", "", line)  # the descriptions
        flags.update(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", line))
    return flags


def check_program(program, binary, share, version):
    top_text = run([binary, "--help"]).stdout
    commands = commands_of(program, top_text)
    helps = {"": top_text}
    for command in commands:
        result = run([binary, command, "--help"])
        check(result.returncode == 0, f"{program} {command} --help exited {result.returncode}")
        helps[command] = result.stdout
    flags = {command: help_flags(text) for command, text in helps.items()}
    every_flag = {f for fl in flags.values() for f in fl}
    check(len(flags[""]) >= 3, f"{program} --help: found only {flags['']} (has the help format changed?)")
    print(f"{program}: commands {commands}, {len(every_flag)} distinct options")

    version_out = run([binary, "--version"])
    if version_out.returncode == 0:
        check(version_out.stdout.strip() == f"{program} {version}",
              f"{program} --version says {version_out.stdout.strip()!r}, the project version is {version}")

    # Man page: the installed .gz and the plain page are the same text.
    page_path = share / "man" / "man1" / f"{program}.1"
    page = page_path.read_text()
    check(gzip.decompress((share / "man" / "man1" / f"{program}.1.gz").read_bytes()).decode() == page,
          f"{page_path}.gz differs from {page_path}")
    plain = page.replace("\\-", "-").replace("\\e", "\\")
    check(f'.TH {program.upper()} 1 "" "{program} {version}"' in page, f"{page_path}: .TH lacks '{program} {version}'")
    for command, fl in flags.items():
        where = f"{program} {command}".strip()
        for flag in fl:
            check(re.search(r"\\fB" + re.escape(flag) + r"\\fR", plain) is not None,
                  f"{page_path}: `{where} {flag}` is not documented")
        if command:
            check(f'.SS "{program} {command}"' in plain, f"{page_path}: no section for `{where}`")
    check(HIDDEN not in page, f"{page_path} documents the hidden {HIDDEN}")
    if shutil.which("groff"):
        rendered = run(["groff", "-man", "-Tutf8", "-ww", "-z", str(page_path)])
        check(rendered.returncode == 0 and not rendered.stderr.strip(),
              f"{page_path}: groff warns: {rendered.stderr.strip()}")
    else:
        check(os.environ.get("CI") != "true", "groff is missing (scripts/setup.sh installs man-db)")

    # bash: the option lists, then the function itself.
    bash_file = share / "bash-completion" / "completions" / program
    bash_text = bash_file.read_text()
    offered = completion_flags_bash(bash_text)
    check(every_flag <= offered, f"{bash_file}: lacks {sorted(every_flag - offered)}")
    check(offered <= every_flag, f"{bash_file}: offers options no --help has: {sorted(offered - every_flag)}")
    check(HIDDEN not in bash_text, f"{bash_file} completes the hidden {HIDDEN}")
    got, want = bash_complete(bash_file, program, ["--"]), {f for f in flags[""] if f.startswith("--")}
    check(got == want, f"{bash_file}: `{program} --<TAB>` lacks {sorted(want - got)}, offers {sorted(got - want)} too")
    if commands:
        offered_first = bash_complete(bash_file, program, [""])
        check(set(commands) <= offered_first, f"{bash_file}: `{program} <TAB>` lacks commands {commands}")
    for command in commands:
        got = bash_complete(bash_file, program, [command, "-"])
        want = set(flags[command])
        check(got == want, f"{bash_file}: `{program} {command} -<TAB>` lacks {sorted(want - got)}, "
                           f"offers {sorted(got - want)} too")
    for command, text in helps.items():
        for match in re.finditer(r"^  (\S+) TEXT:\{([^}]*)\}", text, re.MULTILINE):
            option = match.group(1).split(",")[-1]
            words = ([command] if command else []) + [option, ""]
            got = bash_complete(bash_file, program, words)
            check(got == set(match.group(2).split(",")), f"{bash_file}: `{program} {' '.join(words)}<TAB>` offers "
                                                         f"{sorted(got)}, not the choices {match.group(2)}")
    if program == "meshrun":  # after the script, everything is the script's: no meshrun options
        check(not bash_complete(bash_file, program, ["--standalone", "train.py", "--"]) & every_flag,
              f"{bash_file}: offers meshrun's options after the script")

    # zsh: the option specs, and the file parses.
    zsh_file = share / "zsh" / "site-functions" / f"_{program}"
    zsh_text = zsh_file.read_text()
    offered = completion_flags_zsh(zsh_text)
    check(zsh_text.startswith(f"#compdef {program}\n"), f"{zsh_file}: does not start with '#compdef {program}'")
    check(every_flag <= offered, f"{zsh_file}: lacks {sorted(every_flag - offered)}")
    check(offered <= every_flag, f"{zsh_file}: offers options no --help has: {sorted(offered - every_flag)}")
    for command in commands:
        check(re.search(r"^\s+'" + re.escape(command) + ":", zsh_text, re.MULTILINE) is not None,
              f"{zsh_file}: does not complete the command {command}")
    check(HIDDEN not in zsh_text, f"{zsh_file} completes the hidden {HIDDEN}")
    if shutil.which("zsh"):
        parsed = run(["zsh", "-n", str(zsh_file)])
        check(parsed.returncode == 0, f"{zsh_file}: zsh -n: {parsed.stderr.strip()}")
    else:
        check(os.environ.get("CI") != "true", "zsh is missing (scripts/setup.sh installs it)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--share", type=Path, required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("programs", nargs="+", help="NAME=PATH of each built program")
    args = parser.parse_args()
    for spec in args.programs:
        program, _, binary = spec.partition("=")
        check_program(program, str(Path(binary).resolve()), args.share.resolve(), args.version)
    if problems:
        print(f"{len(problems)} problem(s); the files come from packaging/cli_docs.py at build time: rebuild, "
              "and if they persist, fix the generator (or the --help it reads)", file=sys.stderr)
        return 1
    print(f"{len(args.programs)} programs: man pages and completions match --help")
    return 0


if __name__ == "__main__":
    sys.exit(main())
