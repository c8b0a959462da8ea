#!/usr/bin/env python3
"""Man page, bash completion and zsh completion of one meshrun program, generated from its --help.

CMake runs this at build time for every program it builds (cmake/Packaging.cmake), so the pages and the
completions always describe the binary next to them; tests/packaging/cli_docs_test.py checks the result
against --help again. Only the standard library: it runs in a launcher-only build without torch.

    cli_docs.py --program meshrun --binary build/bin/meshrun --version 0.1.0 --out build/packaging/share
                [--see-also meshrun-rendezvous,meshrun-trainer] [--extra-section "CONFIGURATION KEYS=--help-config"]

writes, under --out (the layout `cmake --install` gives share/):
    man/man1/PROGRAM.1 and man/man1/PROGRAM.1.gz   (the .gz is what is installed)
    bash-completion/completions/PROGRAM
    zsh/site-functions/_PROGRAM

What --help is read as (CLI11 2.x's format): a description, "Usage: ...", then "Positionals:", "Options:" and
"Subcommands:" sections of two-space-indented entries (a description that does not fit goes on the next
line, indented further), then free text (the footer). Options may come in groups: any other "Title:" line
followed by an option entry opens one; the man page gives each group a subsection. Commands are the
"Subcommands:" entries plus every `PROGRAM WORD` the footer quotes in backticks (meshrun dispatches
ping/check/run before CLI11 sees them); each one's own --help is read the same way. Hidden commands
(meshrun's __orphan-watchdog) appear in neither place, so they are never documented.
"""
from __future__ import annotations

import argparse
import dataclasses
import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

SECTION_HEADERS = {"Positionals:": "positionals", "Options:": "options", "Subcommands:": "subcommands"}
VALUE_TYPES = ("TEXT", "INT", "UINT", "FLOAT", "NUMBER", "BOOLEAN", "FILE", "DIR", "PATH")


@dataclasses.dataclass
class Entry:
    """One option or positional: `-c,--count INT:INT in [1 - 1000000]=4   Number of probes`."""

    names: list[str]
    value: str = ""  # TEXT, INT, ...; empty for a flag
    constraint: str = ""  # what follows the type: "INT in [1 - 10]", "NONNEGATIVE", "{a,b}"
    default: str = ""
    choices: list[str] = dataclasses.field(default_factory=list)
    repeatable: bool = False
    required: bool = False
    description: str = ""
    group: str = "Options"  # the --help group it is listed under

    @property
    def takes_value(self) -> bool:
        return bool(self.value)

    @property
    def takes_path(self) -> bool:
        """A value that names a file or folder (by its description), so it completes as file names."""
        return self.value == "TEXT" and not self.choices and bool(
            re.search(r"\b(files?|folder|dir|directory|path|script)\b|\.json\b|\.safetensors\b", self.description,
                      re.IGNORECASE) or re.search(r"\bFILE\b", self.description))


@dataclasses.dataclass
class HelpPage:
    """One --help output, parsed."""

    description: str = ""
    usage: str = ""
    positionals: list[Entry] = dataclasses.field(default_factory=list)
    options: list[Entry] = dataclasses.field(default_factory=list)
    subcommands: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    footer: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Command:
    """A subcommand: its name and its own help; alias_of_top when its help is the program's own."""

    name: str
    page: HelpPage
    alias_of_top: bool = False


def parse_entry(spec: str, description: str, positional: bool) -> Entry:
    """`--nproc-per-node,--nproc_per_node TEXT=1` -> names, value type, default...; `target TEXT REQUIRED`."""
    head, _, rest = spec.partition(" ")
    entry = Entry(names=[head] if positional else head.split(","), description=description.strip())
    rest = rest.strip()
    if rest.endswith("..."):
        entry.repeatable, rest = True, rest[:-3].strip()
    if re.search(r"(^| )REQUIRED$", rest):
        entry.required, rest = True, re.sub(r"(^| )REQUIRED$", "", rest).strip()
    if "=" in rest:
        rest, entry.default = rest.split("=", 1)
    if rest:
        entry.value, _, entry.constraint = rest.partition(":")
        choices = re.search(r"\{([^}]*)\}", entry.constraint)
        if choices:
            entry.choices = [c for c in choices.group(1).split(",") if c]
        if entry.value not in VALUE_TYPES:
            raise ValueError(f"unexpected value type '{entry.value}' in help entry '{spec}'")
    return entry


def parse_help(text: str) -> HelpPage:
    """Reads one CLI11 --help (this file's docstring says how)."""
    page = HelpPage()
    state = "description"  # then "between" (blank lines), a section's name, and at last "footer"
    description: list[str] = []
    entries: list[list[str]] = []  # [section, spec, description, group]
    group = "Options"
    lines = text.splitlines()
    for index, line in enumerate(lines):
        stripped = line.strip()
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if state == "description":
            if line.startswith("Usage:"):
                page.usage, state = stripped[len("Usage:"):].strip(), "between"
            elif stripped:
                description.append(stripped)
        elif state != "footer" and stripped in SECTION_HEADERS:
            state = SECTION_HEADERS[stripped]
            group = stripped[:-1]
        elif state != "footer" and re.match(r"^\S.*:$", line) and following.startswith("  -"):
            state, group = "options", stripped[:-1]
        elif state in SECTION_HEADERS.values():
            if not stripped:
                state = "between"
            elif line.startswith("   ") and entries and entries[-1][0] == state:  # (more of) the entry's description
                entries[-1][2] = (entries[-1][2] + " " + stripped).strip()
            else:
                entries.append([state, *split_columns(stripped), group])
        elif stripped or state == "footer":
            state = "footer"
            page.footer.append(line.rstrip())
    page.description = " ".join(description)
    while page.footer and not page.footer[-1].strip():
        page.footer.pop()
    for section, spec, entry_description, entry_group in entries:
        if section == "subcommands":
            page.subcommands.append((spec.split()[0], entry_description))
        elif section == "positionals":
            page.positionals.append(parse_entry(spec, entry_description, positional=True))
        else:
            page.options.append(parse_entry(spec, entry_description, positional=False))
            page.options[-1].group = entry_group
    return page


def split_columns(stripped: str) -> tuple[str, str]:
    """`-c,--count INT=4      Number of probes` -> (spec, description): two or more spaces separate them."""
    parts = re.split(r"\s{2,}", stripped, maxsplit=1)
    return parts[0], parts[1] if len(parts) > 1 else ""


def run_help(binary: str, args: list[str]) -> str:
    result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise SystemExit(f"cli_docs.py: `{binary} {' '.join(args)}` exited {result.returncode}: {result.stderr.strip()}")
    return result.stdout


def collect(program: str, binary: str) -> tuple[HelpPage, list[Command]]:
    """The program's help and each command's (CLI11 subcommands and the footer's `PROGRAM WORD` mentions)."""
    top_text = run_help(binary, ["--help"])
    top = parse_help(top_text)
    names = [name for name, _ in top.subcommands]
    for match in re.finditer(r"`" + re.escape(program) + r" ([a-z][a-z0-9-]*)", "\n".join(top.footer)):
        if match.group(1) not in names:
            names.append(match.group(1))
    commands = []
    for name in names:
        text = run_help(binary, [name, "--help"])
        commands.append(Command(name, parse_help(text), alias_of_top=text == top_text))
    return top, commands


# ---------------------------------------------------------------------------------------------- man page


def roff(text: str) -> str:
    """Escapes text for a roff line: backslashes, every hyphen as a minus (so flags copy-paste), leading dots."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + text if text[:1] in (".", "'") else text


def entry_notes(entry: Entry) -> str:
    notes = []
    if entry.choices:
        notes.append("one of: " + ", ".join(entry.choices))
    elif entry.constraint and entry.constraint != entry.value:
        constraint = re.sub(r"^(INT|UINT|FLOAT|TEXT) in ", "", entry.constraint)
        bounds = re.fullmatch(r"\[(\S+) - (\S+)\]", constraint)
        if bounds:
            constraint = f"from {bounds.group(1)} to {bounds.group(2)}"
        notes.append({"NONNEGATIVE": "non-negative", "POSITIVE": "positive"}.get(constraint, constraint))
    if entry.default:
        notes.append("default: " + entry.default)
    if entry.repeatable and "repeatable" not in entry.description:
        notes.append("repeatable")
    if entry.required:
        notes.append("required")
    return f" ({'; '.join(notes)})" if notes else ""


def man_entry(entry: Entry) -> list[str]:
    names = ", ".join(f"\\fB{roff(n)}\\fR" for n in entry.names)
    value = f" \\fI{entry.value}\\fR" if entry.value else ""
    return [".TP", names + value, roff(entry.description + entry_notes(entry))]


def man_usage(program_words: str, usage: str) -> str:
    """CLI11 prints argv[0] (a build path, sometimes) first: the program's name stands there instead."""
    rest = usage.split(" ", 1)[1] if " " in usage else ""
    if program_words.count(" ") and rest.startswith(program_words.split(" ", 1)[1]):
        rest = rest[len(program_words.split(" ", 1)[1]):].strip()
    return f".B {roff(program_words)}\n{roff(rest)}" if rest else f".B {roff(program_words)}"


def man_paragraphs(lines: list[str]) -> list[str]:
    """Footer text: a blank line or a line opening with `Word:` starts a paragraph; the rest is filled."""
    out, started = [], False
    for line in lines:
        stripped = line.strip()
        if not stripped:
            started = False
            continue
        if not started or re.match(r"^[A-Z][A-Za-z ]{0,30}:", stripped):
            out.append(".PP")
            started = True
        out.append(roff(stripped))
    return out


def strip_program(program: str, description: str) -> str:
    """`meshrun ping: TCP ping ...` -> `TCP ping ...`."""
    return re.sub(r"^" + re.escape(program) + r"(\s+\S+)?:\s*", "", description)


def name_line(program: str, description: str) -> str:
    return f"{roff(program)} \\- {roff(strip_program(program, description))}"


def render_man(program: str, version: str, top: HelpPage, commands: list[Command], see_also: list[str],
               extra_sections: list[tuple[str, str]]) -> str:
    out = [
        f'.\\" Generated from `{program} --help` by packaging/cli_docs.py at build time: do not edit.',
        f'.TH {program.upper()} 1 "" "{program} {version}" "User Commands"',
        ".nh",  # no hyphenation: flags and variable names stay whole
        ".ad l",
        ".SH NAME",
        name_line(program, top.description),
        ".SH SYNOPSIS",
        man_usage(program, top.usage),
    ]
    for command in commands:
        out += [".br", man_usage(f"{program} {command.name}", command.page.usage)]
    summary = strip_program(program, top.description)
    out += [".SH DESCRIPTION", roff(summary[:1].upper() + summary[1:])]
    out += man_paragraphs(top.footer)
    if top.positionals:
        out.append(".SH ARGUMENTS")
        for entry in top.positionals:
            out += man_entry(entry)
    out.append(".SH OPTIONS")
    grouped = len({entry.group for entry in top.options}) > 1
    for index, entry in enumerate(top.options):
        if grouped and (index == 0 or top.options[index - 1].group != entry.group):
            out.append(f'.SS "{roff(entry.group)}"')
        out += man_entry(entry)
    if commands:
        out.append(".SH COMMANDS")
        for command in commands:
            out.append(f'.SS "{roff(program)} {roff(command.name)}"')
            if command.alias_of_top:
                out.append(roff(f"The same as {program} without a command: the options above."))
                continue
            out.append(roff(command_summary(program, command)))
            out += [".PP", "Usage:", man_usage(f"{program} {command.name}", command.page.usage)]
            for entry in command.page.positionals + command.page.options:
                out += man_entry(entry)
            out += man_paragraphs(command.page.footer)
    for title, text in extra_sections:
        out.append(f".SH {title}")
        for line in text.splitlines():
            if not line.strip():
                continue
            key, description = split_columns(line.strip())
            out += [".TP", f"\\fB{roff(key)}\\fR", roff(description)]
    if see_also:
        out += [".SH SEE ALSO", ",\n".join(f".BR {roff(p)} (1)" for p in see_also)]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------- completions


def shell_words(words: list[str]) -> str:
    return " ".join(words)


def bash_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def render_bash(program: str, top: HelpPage, commands: list[Command]) -> str:
    func = "_" + re.sub(r"[^A-Za-z0-9_]", "_", program)
    pages = [("-", top)] + [(c.name, top if c.alias_of_top else c.page) for c in commands]
    options = "\n".join(f"    [{k}]={bash_quote(shell_words([n for e in p.options for n in e.names]))}" for k, p in pages)
    values = "\n".join(
        f"    [{k}]={bash_quote(shell_words([n for e in p.options if e.takes_value for n in e.names]))}" for k, p in pages)
    choices = "".join(f"\n    [{bash_quote(k + '|' + n)}]={bash_quote(shell_words(e.choices))}"
                      for k, p in pages for e in p.options if e.choices for n in e.names)
    paths = "\n".join(
        f"    [{k}]={bash_quote(shell_words([n for e in p.options if e.takes_path for n in e.names]))}" for k, p in pages)
    command_names = shell_words([c.name for c in commands])
    return f"""# bash completion for {program}: generated from `{program} --help` by packaging/cli_docs.py (do not edit).
# Commands and options come from --help; an option's value completes from its choices, or as a file name
# when its description names a file, folder or path (else not at all).
# After the first argument that is not a command (the script, for meshrun), everything completes as files.
{func}() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}}
  local commands={bash_quote(command_names)}
  local -A options=(
{options}
  )
  local -A takes_value=(
{values}
  )
  local -A choices=({choices}
  )
  local -A takes_path=(
{paths}
  )
  local command=- word skip=0 positional=0 i
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=${{COMP_WORDS[i]}}
    if [[ $word == = || $word == : ]]; then skip=1; continue; fi  # --opt=value and host:port split here
    if ((skip)); then skip=0; continue; fi
    if [[ $word == -* ]]; then
      [[ " ${{takes_value[$command]}} " == *" $word "* ]] && skip=1
      continue
    fi
    if [[ $command == - && $positional == 0 && " $commands " == *" $word "* ]]; then command=$word; continue; fi
    positional=$((positional + 1))
  done
  local option=$prev
  [[ $prev == = && $COMP_CWORD -ge 2 ]] && option=${{COMP_WORDS[COMP_CWORD-2]}}
  [[ $cur == = ]] && cur=
  if [[ $option == -* && " ${{takes_value[$command]}} " == *" $option "* ]]; then
    if [[ -n ${{choices["$command|$option"]-}} ]]; then
      mapfile -t COMPREPLY < <(compgen -W "${{choices["$command|$option"]}}" -- "$cur")
    elif [[ " ${{takes_path[$command]}} " == *" $option "* ]]; then
      compopt -o filenames 2>/dev/null
      mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    fi
  elif [[ $cur == -* && $positional == 0 ]]; then
    mapfile -t COMPREPLY < <(compgen -W "${{options[$command]}}" -- "$cur")
  elif [[ $command == - && $positional == 0 && -n $commands ]]; then
    compopt -o filenames 2>/dev/null
    mapfile -t COMPREPLY < <(compgen -W "$commands" -- "$cur"; compgen -f -- "$cur")
  else
    compopt -o filenames 2>/dev/null
    mapfile -t COMPREPLY < <(compgen -f -- "$cur")
  fi
  return 0
}}
complete -F {func} {program}
"""


def zsh_escape_description(text: str) -> str:
    return text.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]").replace("'", "'\\''")


def zsh_option_spec(entry: Entry) -> str:
    description = zsh_escape_description(entry.description)
    if entry.takes_value:
        forms = [n + ("=" if n.startswith("--") else "+") for n in entry.names]
        if entry.choices:
            action = "(" + " ".join(entry.choices) + ")"
        elif entry.takes_path:
            action = "_files"
        else:
            action = " "
        tail = f"[{description}]:{entry.value.lower()}:{action}"
    else:
        forms, tail = list(entry.names), f"[{description}]"
    prefix = "*" if entry.repeatable else ""
    exclusion = f"'({' '.join(entry.names)})'" if len(entry.names) > 1 and not entry.repeatable else ""
    names = "{" + ",".join(forms) + "}" if len(forms) > 1 else forms[0]
    return f"{exclusion}{prefix}{names}'{tail}'" if not prefix else f"'*'{names}'{tail}'"


def zsh_arguments(page: HelpPage, extra: list[str]) -> str:
    specs = [zsh_option_spec(e) for e in page.options]
    for i, entry in enumerate(page.positionals, start=1):
        specs.append(f"'{i}:{entry.names[0]}:_files'" if entry.value == "TEXT" else f"'{i}:{entry.names[0]}: '")
    return " \\\n      ".join(["_arguments -s -S :"] + specs + extra)


def render_zsh(program: str, top: HelpPage, commands: list[Command]) -> str:
    func = "_" + re.sub(r"[^A-Za-z0-9_]", "_", program)
    header = (f"#compdef {program}\n# zsh completion for {program}: generated from `{program} --help` by "
              "packaging/cli_docs.py (do not edit).\n\n")
    if not commands:
        return header + f"{func}() {{\n  {zsh_arguments(top, [])}\n}}\n\n{func} \"$@\"\n"
    described = "\n".join("    " + bash_quote(f"{c.name}:{command_summary(program, c)}") for c in commands)
    cases = []
    for command in commands:
        if command.alias_of_top:  # `meshrun run ...`: the program's own options, then the script
            arguments = zsh_arguments(top, ["'1:script:_files'", "'*::argument:_files'"])
        else:
            arguments = zsh_arguments(command.page, [])
        cases.append(f"        {command.name}) {arguments} && ret=0 ;;")
    # A CLI11 program's first word is one of its subcommands; meshrun's is a command or the script to run.
    first = f"{func}_commands" if top.subcommands else \
        f"_alternative 'commands:command:{func}_commands' 'files:script:_files'"
    return header + f"""{func}_commands() {{
  local -a commands=(
{described}
  )
  _describe -t commands 'command' commands
}}

{func}() {{
  local curcontext=$curcontext state line ret=1
  {zsh_arguments(top, ["'1: :->command'", "'*:: :->arguments'"])} && ret=0
  case $state in
    command) {first} && ret=0 ;;
    arguments)
      case ${{line[1]}} in
{chr(10).join(cases)}
        *) _files && ret=0 ;;
      esac ;;
  esac
  return ret
}}

{func} "$@"
"""


def command_summary(program: str, command: Command) -> str:
    if command.alias_of_top:
        return f"the same as {program} without a command"
    return strip_program(program, command.page.description)


# ------------------------------------------------------------------------------------------------- main


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description="Man page and bash/zsh completions from a program's --help.")
    parser.add_argument("--program", required=True, help="the installed name, e.g. meshrun")
    parser.add_argument("--binary", required=True, help="the built program to run with --help")
    parser.add_argument("--version", required=True, help="the project version, for the page's header")
    parser.add_argument("--out", required=True, type=Path, help="the share/ folder to write into")
    parser.add_argument("--see-also", default="", help="comma-separated programs for SEE ALSO")
    parser.add_argument("--extra-section", action="append", default=[],
                        help='"TITLE=--flag": a man section of the `KEY  DESCRIPTION` lines that --flag prints')
    args = parser.parse_args()
    if not os.access(args.binary, os.X_OK):
        print(f"cli_docs.py: {args.binary} is not an executable (build it first)", file=sys.stderr)
        return 1
    top, commands = collect(args.program, args.binary)
    if not top.options:
        print(f"cli_docs.py: found no options in `{args.binary} --help`: has its format changed?", file=sys.stderr)
        return 1
    extra = []
    for spec in args.extra_section:
        title, _, flag = spec.partition("=")
        extra.append((title, run_help(args.binary, [flag])))
    see_also = [p for p in args.see_also.split(",") if p and p != args.program]
    man = render_man(args.program, args.version, top, commands, see_also, extra)
    man_path = args.out / "man" / "man1" / f"{args.program}.1"
    write(man_path, man)
    with open(str(man_path) + ".gz", "wb") as raw:  # mtime 0 and no name: the same bytes on every build
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz:
            gz.write(man.encode())
    write(args.out / "bash-completion" / "completions" / args.program, render_bash(args.program, top, commands))
    write(args.out / "zsh" / "site-functions" / f"_{args.program}", render_zsh(args.program, top, commands))
    return 0


if __name__ == "__main__":
    sys.exit(main())
