#!/usr/bin/env bash
# ctest hands each Catch2 test name to the test binary as a test spec: a name that starts with '-' is
# read as an option and a ';' splits it in two, so such tests would fail (or vanish) in ctest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bad=$(grep -rnE 'TEST_CASE\("(-|[^"]*;)' "$ROOT/tests" --include='*.cpp' || true)
if [ -n "$bad" ]; then
  echo "Catch2 test names must not start with '-' or contain ';' (rename them):" >&2
  echo "$bad" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
echo "1 passed, 0 failed"
