#!/usr/bin/env bash
# Builds the daemon, protocol and their tests with AddressSanitizer + UndefinedBehaviorSanitizer
# (build-asan/, no trainer) and runs those tests there. CI runs this through ctest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# ccache keys on paths relative to the checkout: a fresh clone's tree reuses another clone's objects.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"
# With -g, ccache also keys on the working folder (debug info names it) unless told not to: the folder differs
# from clone to clone, so without this a debug tree (ASan, fuzz) is rebuilt whole in every fresh clone.
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
DIR="$ROOT/build-asan"
cd "$ROOT" && cmake --preset asan >/dev/null
cmake --build "$DIR" --target meshrun-rendezvous test_common test_proto test_rendezvous_unit test_rendezvous_server
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for t in test_common test_proto test_rendezvous_unit test_rendezvous_server; do
  echo "== $t (ASan+UBSan)"
  "$DIR/bin/$t" 2>&1 | grep -v '^\[' | tail -n 3
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "FAIL: $t under ASan+UBSan" >&2; exit 1; }
done
echo "== daemon CLI (ASan+UBSan)"
"$ROOT/tests/rendezvous/daemon_cli.sh" "$DIR/bin/meshrun-rendezvous" "$ROOT/.venv/bin/python"
