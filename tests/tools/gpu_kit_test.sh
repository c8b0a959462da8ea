#!/usr/bin/env bash
# The GPU kit's no-registry path, on this (Debian, CPU) machine: fetch the .debs, build the launcher, the
# daemon and meshrun-nccl-bench against the unpacked prefix alone (the system's copies of those headers are
# hidden in a private mount namespace), check that the binaries run on the kit's own shared libraries, and
# that the checks report what this machine can and cannot run.
#   gpu_kit_test.sh ROOT BUILD_DIR PYTHON
set -euo pipefail
ROOT="$1"; WORK="$2/gpu-kit-test"; PYTHON="$3"
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=../support/skip.sh
source "$ROOT/tests/support/skip.sh"
if [ "$(id -u)" -ne 0 ] || ! unshare --mount true 2>/dev/null; then
  skip_or_fail "needs root and mount namespaces (unshare --mount) to hide the system headers"
fi
rm -rf "$WORK"; mkdir -p "$WORK/out"
"$ROOT/scripts/gpu_kit.sh" fetch
# Unoptimised: what is tested is that it builds and runs from the kit's prefix, and -O0 compiles a third faster.
KIT_BUILD_TYPE=None KIT_BUILD="$WORK/build" PYTHON="$PYTHON" "$ROOT/scripts/gpu_kit.sh" build --hide-system-deps --no-trainer

bin="$WORK/build/bin"
# Outputs are read whole before grep: under pipefail, `grep -q` leaving early can kill the writer with SIGPIPE
# and fail the pipeline although it matched.
version=$("$bin/meshrun" --version) || fail "the kit's meshrun does not run"
grep -q "meshrun" <<< "$version" || fail "the kit's meshrun --version printed: $version"
"$bin/meshrun-rendezvous" --help >/dev/null || fail "the kit's meshrun-rendezvous does not run"
# spdlog and fmt come from the kit's prefix, not from the system's copies (which setup.sh installed too).
libs=$(ldd "$bin/meshrun")
grep -E "libspdlog|libfmt" <<< "$libs" | grep -v "$ROOT/.gpu-kit/prefix" && fail "meshrun loads spdlog/fmt from outside the kit"
grep -q "$ROOT/.gpu-kit/prefix.*libspdlog" <<< "$libs" || fail "meshrun does not load the kit's libspdlog: $libs"

set +e
OUT="$WORK/out" KIT_BUILD="$WORK/build" PYTHON="$PYTHON" "$ROOT/scripts/gpu_kit.sh" check check devices train_1b
rc=$?
set -e
"$PYTHON" - "$WORK/out/report.json" "$rc" <<'PY'
import json, sys
report, rc = json.load(open(sys.argv[1])), int(sys.argv[2])
status = {c["check"]: c for c in report["checks"]}
assert list(status) == ["check", "devices", "train_1b"], list(status)
assert status["check"]["status"] == "pass", status["check"]
assert "gpu.devices" in status["check"]["figures"], status["check"]
gpu = bool(report["machine"]["gpu"]) and not report["machine"]["gpu"].startswith("none")
for name in ("devices", "train_1b"):
    c = status[name]
    if gpu:
        assert c["status"] == "pass", c
    else:  # a CPU machine: said so, not run, not failed
        assert c["status"] == "skip" and "no CUDA device" in c["summary"], c
assert rc == 0, f"gpu_kit.sh check exited {rc}"
print("gpu kit report:", {k: v["status"] for k, v in status.items()})
PY
