#!/usr/bin/env bash
# clang-tidy with the repository's .clang-tidy over our own sources, using the build's compile_commands.json
# (run scripts/setup.sh first). Trainer files that include LibTorch's headers take minutes each on 2 cores:
# they are checked only with --all; the trainer's other files (ninja's recorded dependencies name no torch
# header) are checked always. The suite runs this as lint.tidy.
# A unit whose inputs are those of a unit found clean before (tests/tidy_clean.txt: a key over clang-tidy's
# version, .clang-tidy, the compile command and every file the compiler read; scripts/tidy_record.py) is not
# checked again; --every checks them all; --record rewrites tests/tidy_clean.txt after a clean run (commit it).
#   scripts/tidy.sh [--all] [--every] [--record] [-j N] [-p BUILD_DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JOBS="$(nproc)"
BUILD="$ROOT/build"
ALL=0 EVERY=0 RECORD=0
RECORD_FILE="$ROOT/tests/tidy_clean.txt"
DIRS=(common proto rendezvous launcher diagnostics tools)
while (($#)); do
  case "$1" in
    --all) ALL=1 ;;
    --every) EVERY=1 ;;
    --record) RECORD=1 ;;
    -j) JOBS="$2"; shift ;;
    -p) BUILD="$2"; shift ;;
    *) echo "tidy.sh: unknown option '$1' (use --all, --every, --record, -j N or -p BUILD_DIR)" >&2; exit 2 ;;
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
# Each unit's key; the units to check are those whose key no clean run recorded.
PYTHON=python3; [ -x "$ROOT/.venv/bin/python" ] && PYTHON="$ROOT/.venv/bin/python"
keys_out=$("$PYTHON" "$ROOT/scripts/tidy_record.py" keys "$BUILD" "$ROOT" "${files[@]}") ||
  { echo "tidy.sh: scripts/tidy_record.py failed (above)" >&2; exit 2; }
mapfile -t keyed <<< "$keys_out"
((${#keyed[@]} == ${#files[@]})) ||
  { echo "tidy.sh: ${#keyed[@]} keys for ${#files[@]} translation units (scripts/tidy_record.py)" >&2; exit 2; }
declare -A clean=()
if ((!EVERY)) && [ -f "$RECORD_FILE" ]; then
  while read -r key; do [ -n "$key" ] && clean[$key]=1; done < <(grep -v '^#' "$RECORD_FILE")
fi
check=() keys=()
for line in "${keyed[@]}"; do
  file=${line% *} key=${line##* }
  [ "$key" != - ] && keys+=("$key")
  [ "$key" != - ] && [ -n "${clean[$key]:-}" ] && continue
  check+=("$file")
done
echo "tidy.sh: ${#files[@]} translation units, $((${#files[@]} - ${#check[@]})) unchanged since a clean run (tests/tidy_clean.txt), ${#check[@]} to check"
if ((${#check[@]})); then
  run-clang-tidy -quiet -p "$BUILD" -j "$JOBS" "${check[@]/#/$ROOT/}"
fi
if ((RECORD)); then
  { echo "# scripts/tidy.sh --record: keys of the translation units clang-tidy found clean (scripts/tidy_record.py)"
    printf '%s\n' "${keys[@]}" | sort -u; } > "$RECORD_FILE"
  echo "tidy.sh: recorded ${#keys[@]} clean units in $RECORD_FILE"
fi
