#!/usr/bin/env bash
# Healthy on both straggler routes at once must never be named a straggler (docs/progress.md, stragglers): the soak the
# suite's cluster.straggler.healthy_both runs for 90 s, here for DURATION seconds: tests/cluster/straggler_test.sh's
# healthy_both scenario (two jobs side by side on two namespace nodes, one with beats and one without, equal work per
# step, each job's cores shared with the other's busy ranks, every flag at its default). Prints the verdict.
# Root. Not part of ctest.
#   bench/faults/straggler_healthy_both.sh        (env DURATION=300, MESHRUN)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MESHRUN=${MESHRUN:-$ROOT/build/bin/meshrun}
DURATION=${DURATION:-300}
echo "# bench/faults/straggler_healthy_both.sh $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, DURATION=$DURATION"
HEALTHY_S=$DURATION "$ROOT/tests/cluster/straggler_test.sh" healthy_both "$MESHRUN" "$ROOT/.venv/bin"
