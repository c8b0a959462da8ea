#!/bin/bash
# The goodput ledger against a truth it did not compute (docs/daemon.md, "The goodput ledger"): the same Gloo job
# (goodput_truth_job.py: a stall, a rank-0 save, a restart inside) run twice side by side, once with step beats
# and once without, every hang flag at its default. The job times its own steps with time.monotonic(); the
# ledger's productive time (goodput.json) must be within 2 % of the run's wall time of the steps' total, and
# the stall, the save and the restart must be badput: with beats the save is a checkpoint phase, without it a
# stall like the data wait (the collectives alone cannot tell them apart).
# Usage: goodput_truth_test.sh MESHRUN VENV_BIN
MESHRUN=$1 VENV_BIN=$2
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
# 3000 steps of ~10 ms: about 45 s of wall time. Without beats the ledger sees completions in the hook's
# reports, every 0.1 s, so each end of an attempt can be off by up to one report.
STEPS=${GOODPUT_TRUTH_STEPS:-3000}
fails=0
fail() { echo "FAILED ($1): ${*:2}"; fails=$((fails + 1)); }
for variant in beats collectives; do
  mkdir -p "$W/$variant/out" "$W/$variant/logs"
  flag=(); [ "$variant" = beats ] && flag=(--beats)
  (
    PATH="$VENV_BIN:$PATH" "$MESHRUN" --standalone --nproc-per-node 2 --max-restarts 1 --log-dir "$W/$variant/logs" \
      "$HERE/goodput_truth_job.py" "$W/$variant/out" "$STEPS" "${flag[@]}" > "$W/$variant/job.log" 2>&1
    echo $? > "$W/$variant/rc"
  ) &
done
wait
for variant in beats collectives; do
  [ "$(cat "$W/$variant/rc")" = 0 ] || { fail $variant "the job ended $(cat "$W/$variant/rc")"; cat "$W/$variant/job.log"; continue; }
  ledger=$(ls "$W/$variant/logs"/*/goodput.json 2> /dev/null | head -1)
  [ -n "$ledger" ] || { fail $variant "no goodput.json"; continue; }
  "$VENV_BIN/python" - "$ledger" "$W/$variant/out/steps" "$STEPS" "$variant" << 'PY' || fails=$((fails + 1))
import json, sys
ledger = json.load(open(sys.argv[1]))
steps, expected, variant = {}, int(sys.argv[3]), sys.argv[4]
for line in open(sys.argv[2]):
    attempt, step, start, end = line.split()
    steps[int(step)] = float(end) - float(start)  # no step is done twice (the job's own checkpoint)
truth = sum(steps.values())
wall, productive = ledger["wall_s"], ledger["productive_s"]
problems = []
if len(steps) != expected:
    problems.append(f"the job timed {len(steps)} steps, expected {expected}")
if abs(productive - truth) > 0.02 * wall:
    problems.append(f"productive {productive:.2f} s, the job's own steps {truth:.2f} s: off by "
                    f"{abs(productive - truth):.2f} s, more than 2 % of the wall time {wall:.1f} s")
if ledger["restarts"] != 1:
    problems.append(f"{ledger['restarts']} restarts in the ledger, expected 1")
want = "beats" if variant == "beats" else "collectives"
if ledger.get("measure") != want:
    problems.append(f"measured from {ledger.get('measure')}, expected {want}")
waits = ledger["stall_s"] + ledger["checkpoint_s"]
if waits < 0.8 * 9:  # the 5 s stall and the 4 s save
    problems.append(f"stalls and checkpoints {waits:.1f} s, under the 9 s of the stall and the save")
if variant == "beats" and not 3 <= ledger["checkpoint_s"] <= 5:
    problems.append(f"the save is {ledger['checkpoint_s']:.1f} s of checkpoint, not about 4 s")
accounted = sum(ledger[k] for k in ("productive_s", "startup_s", "checkpoint_s", "other_phases_s", "stall_s",
                                    "hang_wait_s", "restarts_s", "work_lost_s", "shutdown_s", "untold_s", "in_progress_s"))
if abs(accounted - wall) > 0.01 * wall:
    problems.append(f"the parts sum to {accounted:.2f} s, the wall time is {wall:.2f} s")
print(f"GOODPUT {variant}: wall {wall:.1f} s, productive {productive:.2f} s, the job's own steps {truth:.2f} s "
      f"({100 * (productive - truth) / wall:+.2f} % of the wall); stalls {ledger['stall_s']:.1f} s, checkpoints "
      f"{ledger['checkpoint_s']:.1f} s, restarts {ledger['restarts_s']:.1f} s, start-up {ledger['startup_s']:.1f} s")
for p in problems:
    print(f"FAILED ({variant}): {p}")
sys.exit(1 if problems else 0)
PY
  grep "meshrun: goodput" "$W/$variant/job.log" | sed "s/^/LINE $variant: /"
done
echo "$fails failure(s)"
[ "$fails" = 0 ]
