#!/usr/bin/env python3
"""No include cycle between the folders of a component (docs/architecture.md): each folder of launcher/ (and
the files beside them, as one more node) may include another only if that one never includes it back, through
any chain. Prints each cycle with one #include line per edge, and fails.
  lint_folder_cycles.py [COMPONENT...]      (default: launcher)"""
import collections
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^#include "([^"]+)"')


def include_edges(root, component):
    """folder -> {included folder: [the #include lines]} for the component's tracked sources."""
    listed = subprocess.run(
        ["git", "ls-files", f"{component}/*.cpp", f"{component}/*.hpp", f"{component}/*.in"],
        cwd=root, capture_output=True, text=True, check=True).stdout.split()
    edges = collections.defaultdict(lambda: collections.defaultdict(list))
    for path in listed:
        source = os.path.dirname(path)
        with open(os.path.join(root, path), errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m or not m.group(1).startswith(component + "/"):
                    continue
                target = os.path.dirname(m.group(1))
                if target != source:
                    edges[source][target].append(f"{path}:{number} includes {m.group(1)}")
    return edges


def cycles(edges):
    """The strongly connected components of more than one folder (Tarjan's algorithm, iterative)."""
    nodes = sorted(set(edges) | {t for s in edges for t in edges[s]})
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, {}))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bad = False
    for component in sys.argv[1:] or ["launcher"]:
        edges = include_edges(root, component)
        if not edges:
            print(f"{component}: no includes between its folders were found: the lint would prove nothing")
            bad = True
        for members in cycles(edges):
            bad = True
            print(f"include cycle between folders: {' '.join(members)}")
            for a in members:
                for b in members:
                    if b in edges.get(a, {}):
                        lines = edges[a][b]
                        more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
                        print(f"  {a} -> {b}: {lines[0]}{more}")
    if bad:
        print("a folder may include another only if that one never includes it back (docs/architecture.md)",
              file=sys.stderr)
        return 1
    print("no include cycle between the folders of " + ", ".join(sys.argv[1:] or ["launcher"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
