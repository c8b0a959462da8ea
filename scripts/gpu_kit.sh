#!/usr/bin/env bash
# GPU kit: build and exercise meshrun on a bare CUDA machine that has no package registry (no apt, no pip
# downloads), e.g. the device machine some developer sessions are lent. Two halves:
#
#   scripts/gpu_kit.sh fetch              HERE (Debian 12, network): the .deb files of the header/dev
#                                         dependencies (~11 MB) into .gpu-kit/debs (git-ignored; carry that
#                                         folder alone: .gpu-kit/prefix, unpacked, is ~170 MB)
#   scripts/gpu_kit.sh build [--hide-system-deps] [--no-trainer]
#                                         THERE: unpack the .debs into a local prefix (never into /), configure
#                                         against that prefix and the machine's own LibTorch, build meshrun,
#                                         meshrun-rendezvous, meshrun-trainer (+ CUDA plugin), meshrun-nccl-bench
#   scripts/gpu_kit.sh check [CHECK ...]  THERE: run the checks (all by default) and write report.txt and
#                                         report.json under $OUT (the device tool's folder) or .gpu-kit/out
#   scripts/gpu_kit.sh all                build, then every check
#   scripts/gpu_kit.sh list               the checks and what each measures
#
# --hide-system-deps (root): builds in a private mount namespace in which the system's copies of Boost,
# CLI11, spdlog, fmt, nlohmann-json and zlib headers are hidden, proving the build uses the kit's prefix
# alone (run it on the Debian machine, where those packages are installed). --no-trainer leaves LibTorch
# out (the launcher, the daemon and, with CUDA, meshrun-nccl-bench: what tests/tools/gpu_kit_test.sh builds).
# Environment: PYTHON (python3; its torch is the LibTorch built against), KIT_BUILD (build-gpu), JOBS (nproc),
# KIT_BUILD_TYPE (Release; tests/tools/gpu_kit_test.sh uses None: no optimisation, a third less compile time).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# ccache keys on paths relative to the checkout: a fresh clone's kit build reuses another clone's objects.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"
# With -g, ccache also keys on the working folder (debug info names it) unless told not to: the folder differs
# from clone to clone, so without this a debug tree (ASan, fuzz) is rebuilt whole in every fresh clone.
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
KIT="$ROOT/.gpu-kit"
DEBS="$KIT/debs"
PREFIX="$KIT/prefix"
BUILD="${KIT_BUILD:-$ROOT/build-gpu}"
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-$(nproc)}"
# Headers and CMake configs of the launcher's and trainer's dependencies, and the two shared libraries
# spdlog needs at run time (Debian builds spdlog against an external fmt).
PACKAGES=(libboost1.74-dev libcli11-dev libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 nlohmann-json3-dev
          zlib1g-dev zlib1g)

log() { printf '[gpu-kit] %s\n' "$*" >&2; }
die() { printf 'gpu_kit.sh: error: %s\n' "$*" >&2; exit 2; }

fetch() {
  command -v apt-get >/dev/null || die "fetch runs on the Debian machine (it needs apt-get); 'build' runs there"
  mkdir -p "$DEBS"
  rm -f "$DEBS"/*.deb
  # An image whose package lists were cleaned knows no package: refresh them once and try again.
  (cd "$DEBS" && apt-get download "${PACKAGES[@]}" >/dev/null 2>&1) ||
    { apt-get update -qq && (cd "$DEBS" && apt-get download "${PACKAGES[@]}" >/dev/null); } ||
    die "apt-get download ${PACKAGES[*]} failed (network, or run as root for apt-get update)"
  log "$(ls "$DEBS" | wc -l) packages, $(du -sh "$DEBS" | cut -f1) in $DEBS"
}

unpack() {
  compgen -G "$DEBS/*.deb" >/dev/null || die "no .deb files in $DEBS: run 'scripts/gpu_kit.sh fetch' on a Debian machine and carry .gpu-kit"
  rm -rf "$PREFIX"
  mkdir -p "$PREFIX"
  for deb in "$DEBS"/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$PREFIX"
    else  # a .deb is an ar archive holding data.tar.*
      (cd "$(mktemp -d)" && ar x "$deb" && tar -xf data.tar.* -C "$PREFIX")
    fi
  done
}

# Where the machine's torch keeps LibTorch's CMake files and the NCCL it was built against.
torch_cmake_prefix() { "$PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)'; }
torch_nccl_dir() {
  "$PYTHON" - <<'PY'
import importlib.util, os
spec = importlib.util.find_spec("nvidia.nccl")
print(list(spec.submodule_search_locations)[0] if spec else "")
PY
}

configure_and_build() {
  local torch_prefix nccl_dir arch
  torch_prefix="$(torch_cmake_prefix)" || die "$PYTHON cannot import torch: set PYTHON to the interpreter whose torch to build against"
  nccl_dir="$(torch_nccl_dir)"
  arch="$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
  local args=(-S "$ROOT" -B "$BUILD" -G Ninja "-DCMAKE_BUILD_TYPE=${KIT_BUILD_TYPE:-Release}"
              "-DCMAKE_PREFIX_PATH=$PREFIX/usr;$torch_prefix"
              "-DCMAKE_LIBRARY_PATH=$PREFIX/usr/lib/$arch" "-DCMAKE_INCLUDE_PATH=$PREFIX/usr/include"
              "-DZLIB_ROOT=$PREFIX/usr" -DMESHRUN_BUILD_TESTS=OFF
              # Another compiler than Debian's may warn where ours does not: a first light must not stop there.
              -DMESHRUN_WERROR=OFF "-DPython3_EXECUTABLE=$(command -v "$PYTHON")")
  [ "${KIT_NO_TRAINER:-0}" = 1 ] && args+=(-DMESHRUN_BUILD_TRAINER=OFF)
  if [ -n "$nccl_dir" ] && [ -f "$nccl_dir/include/nccl.h" ]; then
    # The NCCL of torch's wheel: the one libtorch_cuda was linked against (the toolkit may have none).
    args+=("-DNCCL_LIBRARY=$nccl_dir/lib/libnccl.so.2" "-DNCCL_INCLUDE_DIR=$nccl_dir/include")
  fi
  if command -v nvidia-smi >/dev/null && [ -z "${TORCH_CUDA_ARCH_LIST:-}" ]; then
    local cc
    cc="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 || true)"
    [ -n "$cc" ] && args+=("-DTORCH_CUDA_ARCH_LIST=$cc")
  fi
  log "configuring $BUILD against $PREFIX and $torch_prefix"
  cmake "${args[@]}" >"$KIT/configure.log" 2>&1 || { tail -40 "$KIT/configure.log" >&2; die "configure failed (full log: $KIT/configure.log)"; }
  grep -E "meshrun|LibTorch" "$KIT/configure.log" >&2 || true
  local targets=(meshrun meshrun-rendezvous)
  grep -q "meshrun: LibTorch .* found" "$KIT/configure.log" && targets+=(meshrun-trainer)
  grep -q "GPU code paths enabled" "$KIT/configure.log" && targets+=(meshrun-nccl-bench)
  log "building ${targets[*]} with $JOBS jobs"
  local start=$SECONDS
  cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" >"$KIT/build.log" 2>&1 ||
    { grep -E "error|Error" "$KIT/build.log" | head -40 >&2; die "build failed (full log: $KIT/build.log)"; }
  log "built in $((SECONDS - start)) s: $(cd "$BUILD/bin" && ls | tr '\n' ' ')"
}

# Hides the system's copies of the kit's packages (bind-mounting empty folders over them) in a private
# mount namespace and builds there: what compiles used the prefix.
build_hiding_system_deps() {
  [ "$(id -u)" -eq 0 ] || die "--hide-system-deps needs root (mount namespace)"
  local empty hide=()
  empty="$(mktemp -d)"
  for p in /usr/include/boost /usr/include/CLI /usr/include/spdlog /usr/include/fmt /usr/include/nlohmann \
           /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json /usr/lib/x86_64-linux-gnu/cmake/spdlog \
           /usr/lib/x86_64-linux-gnu/cmake/fmt /usr/lib/x86_64-linux-gnu/cmake/Boost-1.74.0 \
           /usr/lib/x86_64-linux-gnu/cmake/boost_headers-1.74.0; do
    [ -d "$p" ] && hide+=("$p")
  done
  local zlib_h=/usr/include/zlib.h
  log "hiding ${#hide[@]} system folders and $zlib_h"
  export -f log die configure_and_build torch_cmake_prefix torch_nccl_dir
  unshare --mount --propagation private bash -c '
    set -e; empty="$1"; shift
    for p in "$@"; do mount --bind "$empty" "$p"; done
    [ -f /usr/include/zlib.h ] && mount --bind /dev/null /usr/include/zlib.h
    test ! -e /usr/include/boost/asio.hpp && test ! -s /usr/include/zlib.h
    configure_and_build' _ "$empty" "${hide[@]}"
}

build() {
  local hide=0
  for arg in "$@"; do
    case "$arg" in
      --hide-system-deps) hide=1 ;;
      --no-trainer) export KIT_NO_TRAINER=1 ;;
      *) die "build: unknown option '$arg' (--hide-system-deps, --no-trainer)" ;;
    esac
  done
  unpack
  if ((hide)); then
    export ROOT KIT DEBS PREFIX BUILD PYTHON JOBS
    build_hiding_system_deps
  else
    configure_and_build
  fi
}

report_dir() { echo "${OUT:-$KIT/out}"; }

check() {
  local out
  out="$(report_dir)"
  mkdir -p "$out"
  [ -x "$BUILD/bin/meshrun" ] || die "no $BUILD/bin/meshrun: run 'scripts/gpu_kit.sh build' first"
  "$PYTHON" "$ROOT/scripts/gpu_kit_checks.py" --root "$ROOT" --bin "$BUILD/bin" --out "$out" "$@"
}

case "${1:-}" in
  fetch) fetch ;;
  build) shift; build "$@" ;;
  check) shift; check "$@" ;;
  all) shift; build; check "$@" ;;
  list) "$PYTHON" "$ROOT/scripts/gpu_kit_checks.py" --list ;;
  -h|--help|"") sed -n '2,/^set /{/^#/p}' "$0" ;;
  *) die "unknown command '$1' (fetch, build, check, all, list)" ;;
esac
