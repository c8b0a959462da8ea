#!/usr/bin/env bash
# A healthy job must never be named a straggler (docs/progress.md, stragglers): tests/cluster/straggler_test.sh's
# healthy_jitter scenario (two namespace nodes, one Gloo rank each, equal work per step, the cores shared with a
# spinning process outside the job) for DURATION seconds on ROUTE (beats: compute_s from step beats; arrivals: no
# beats, from when each rank entered its collectives). Prints the figures read once a minute and the verdict.
# Root. Not part of ctest.
#   bench/faults/straggler_healthy.sh        (env DURATION=1800 ROUTE=beats, MESHRUN)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MESHRUN=${MESHRUN:-$ROOT/build/bin/meshrun}
DURATION=${DURATION:-1800} ROUTE=${ROUTE:-beats}
echo "# bench/faults/straggler_healthy.sh $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, DURATION=$DURATION ROUTE=$ROUTE"
HEALTHY_S=$DURATION HEALTHY_ROUTE=$ROUTE "$ROOT/tests/cluster/straggler_test.sh" healthy_jitter "$MESHRUN" "$ROOT/.venv/bin"
