#!/usr/bin/env bash
# Progress beats, hangs and stragglers (docs/progress.md): what a beat costs a worker, how fast a hang is
# named against its budget (2 x median step + floor), how many steps until a 1.5x slow rank is named (from its
# beats, and from arrival times in a script without beats), and what torchrun does with the same hung job.
# Not part of ctest.
#   bench/faults/progress.sh            (env MESHRUN, MESHRUN_RENDEZVOUS, TORCHRUN override the binaries)
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
exec "$here/.venv/bin/python" "$here/bench/faults/progress_bench.py" \
  --meshrun "${MESHRUN:-$here/build/bin/meshrun}" \
  --daemon "${MESHRUN_RENDEZVOUS:-$here/build/bin/meshrun-rendezvous}" \
  --torchrun "${TORCHRUN:-$here/.venv/bin/torchrun}" \
  --job "$here/tests/launcher/progress_job.py" \
  --arrival-job "$here/tests/cluster/straggler_job.py"
