#!/usr/bin/env bash
# clang-tidy with the repository's .clang-tidy over our own sources, using build/compile_commands.json
# (run scripts/setup.sh first). The trainer's files parse LibTorch's headers (slow on 2 cores): they are
# included only with --all.
#   scripts/tidy.sh [--all] [-j N]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JOBS="$(nproc)"
DIRS=(common proto rendezvous launcher diagnostics tools)
while (($#)); do
  case "$1" in
    --all) DIRS+=(trainer) ;;
    -j) JOBS="$2"; shift ;;
    *) echo "tidy.sh: unknown option '$1' (use --all or -j N)" >&2; exit 2 ;;
  esac
  shift
done
[ -f "$ROOT/build/compile_commands.json" ] || { echo "tidy.sh: no build/compile_commands.json: run scripts/setup.sh" >&2; exit 2; }
cd "$ROOT"
mapfile -t files < <(git ls-files "${DIRS[@]/%//*.cpp}" | grep -v 'cuda_plugin.cpp\|tools/nccl_bench/main.cpp')
run-clang-tidy -quiet -p build -j "$JOBS" "${files[@]/#/$ROOT/}"
