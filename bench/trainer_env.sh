# Sourced by the trainer benchmarks: paths of the built programs and the pinned Python, a scratch folder
# removed on exit, and one intra-op thread per rank on both sides of every comparison.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
TRAINER="${TRAINER:-$ROOT/build/bin/meshrun-trainer}"
LAUNCHER="$ROOT/build/bin/meshrun"
[ -x "$TRAINER" ] && [ -x "$LAUNCHER" ] || { echo "build first: cmake --build build --target meshrun-trainer meshrun" >&2; exit 2; }
export OMP_NUM_THREADS=1
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
