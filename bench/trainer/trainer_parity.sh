#!/usr/bin/env bash
# meshrun-trainer against PyTorch's own parts, step by step (tests/trainer/pytorch_parity_test.py with more
# steps), then PyTorch against itself with another reduction order (FULL_SHARD's reduce-scatter vs DDP's
# all-reduce, from the same weights): the noise floor the first figure is to be read against. tiny, fp32,
# 2 CPU ranks. Not part of ctest.
#   bench/trainer/trainer_parity.sh        (env STEPS=200)
set -uo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
steps=${STEPS:-200}
test="$here/tests/trainer/pytorch_parity_test.py"
"$here/.venv/bin/python" "$test" "$here/build/bin/meshrun" "$here/build/bin/meshrun-trainer" "$here" "$steps"
"$here/.venv/bin/python" "$test" "$here/build/bin/meshrun" "$here/build/bin/meshrun-trainer" "$here" "$steps" \
  --reference-only
