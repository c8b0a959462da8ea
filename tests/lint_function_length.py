#!/usr/bin/env python3
"""No function of a component's sources longer than the limit (docs/architecture.md: short functions; issue 55
set 60 lines for launcher/). A function is a definition that starts at column 0 (clang-format's layout) and runs
from its first line to its closing brace, comments and blank lines included. Prints each one over the limit with
its file and line, and fails.
  lint_function_length.py LIMIT COMPONENT..."""
import os
import subprocess
import sys

NOT_FUNCTIONS = ("#", "//", "/*", "namespace", "}", "using", "class ", "struct ", "enum ", "extern", "static_assert")


def functions(lines):
    """(first line number, line count, first line) of each function defined at column 0."""
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line or line[0].isspace() or line.startswith(NOT_FUNCTIONS) or "(" not in line:
            i += 1
            continue
        j = i  # the signature may run over several lines: up to the one that opens the body
        while j < len(lines) and not lines[j].rstrip().endswith("{") and ";" not in lines[j]:
            j += 1
        if j >= len(lines) or ";" in lines[j] and not lines[j].rstrip().endswith("{"):
            i = j + 1
            continue
        depth = 0
        k = j
        while k < len(lines):
            depth += lines[k].count("{") - lines[k].count("}")
            if depth <= 0:
                break
            k += 1
        yield i + 1, k - i + 1, line.strip()
        i = k + 1


def main():
    limit = int(sys.argv[1])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    over = []
    for component in sys.argv[2:]:
        listed = subprocess.run(["git", "ls-files", f"{component}/*.cpp"], cwd=root, capture_output=True, text=True,
                                check=True).stdout.split()
        for path in listed:
            with open(os.path.join(root, path), errors="replace") as f:
                lines = f.read().split("\n")
            over += [(n, path, first, text) for first, n, text in functions(lines) if n > limit]
    for n, path, first, text in sorted(over, reverse=True):
        print(f"{path}:{first}: {n} lines (at most {limit}): {text[:90]}")
    if over:
        print(f"{len(over)} function(s) over {limit} lines: split them (docs/architecture.md)")
        return 1
    print(f"PASS: no function of {' '.join(sys.argv[2:])} over {limit} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
