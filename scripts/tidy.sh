#!/usr/bin/env bash
# clang-tidy with the repository's .clang-tidy over our own sources, using the build's compile_commands.json
# (run scripts/setup.sh first). Trainer files that include LibTorch's headers take minutes each on 2 cores:
# they are checked only with --all; the trainer's other files (ninja's recorded dependencies name no torch
# header) are checked always. The suite runs this as lint.tidy.
#   scripts/tidy.sh [--all] [-j N] [-p BUILD_DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JOBS="$(nproc)"
BUILD="$ROOT/build"
ALL=0
DIRS=(common proto rendezvous launcher diagnostics tools)
while (($#)); do
  case "$1" in
    --all) ALL=1 ;;
    -j) JOBS="$2"; shift ;;
    -p) BUILD="$2"; shift ;;
    *) echo "tidy.sh: unknown option '$1' (use --all, -j N or -p BUILD_DIR)" >&2; exit 2 ;;
  esac
  shift
done
[ -f "$BUILD/compile_commands.json" ] || { echo "tidy.sh: no $BUILD/compile_commands.json: run scripts/setup.sh" >&2; exit 2; }
cd "$ROOT"

# Trainer sources whose object files depend on no LibTorch header, from ninja's dependency log.
torch_free_trainer_sources() {
  ninja -C "$BUILD" -t deps 2>/dev/null | awk '
    /^[^ \t].*: #deps/ { if (obj != "" && !torch) print obj; obj = $1; sub(/:$/, "", obj); torch = 0; next }
    /\/torch\/|\/ATen\/|\/c10\// { torch = 1 }
    END { if (obj != "" && !torch) print obj }' |
    sed -n 's|^trainer/CMakeFiles/[^/]*\.dir/\(.*\)\.o$|trainer/\1|p' | grep '\.cpp$' |
    grep -v 'cpu_kernels.cpp' || true  # GCC-only flags (-fno-thread-jumps) for the SIMD clones
}

mapfile -t files < <(git ls-files "${DIRS[@]/%//*.cpp}" | grep -v 'cuda_plugin.cpp\|tools/nccl_bench/main.cpp')
if ((ALL)); then
  mapfile -t -O "${#files[@]}" files < <(git ls-files 'trainer/*.cpp' | grep -v 'cuda_plugin.cpp')
else
  mapfile -t -O "${#files[@]}" files < <(torch_free_trainer_sources)
fi
echo "tidy.sh: ${#files[@]} translation units"
run-clang-tidy -quiet -p "$BUILD" -j "$JOBS" "${files[@]/#/$ROOT/}"
