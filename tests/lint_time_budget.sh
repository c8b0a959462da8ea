#!/usr/bin/env bash
# The suite's time, held to a budget written in the tree (tests/time_budget.txt): after every other test of this
# ctest run, prints each label's test time and the ten slowest tests, and fails with that list when the run's wall
# time so far passes the budget. A budget passed is a clear failure here, with what to look at, rather than a CI
# run refused at 90 minutes. Also fails when a test has no TIMEOUT of its own (ctest's --timeout would then let
# one hung test cost 900 s).
#
# ctest runs it as lint.time_budget after every other test it runs (tests/CMakeLists.txt makes it DEPEND on all of
# them, as lint.test_count), and it reads ctest's log of this run (the file the ctest process above this script
# holds open, as lint_test_count.sh finds it). A selection (-R, -L, -E...) or a run with lint.test_count still to
# come is timed and listed, never failed on the budget: the budget is for the whole suite.
#   lint_time_budget.sh BUILD_DIR BUDGET_FILE
set -euo pipefail
export LC_ALL=C
BUILD="$1" BUDGET_FILE="$2"
SELF="lint.time_budget"

# --- this run's ctest process and its log ---
log="" ctest_pid=""
pid=$PPID
while [ -z "$log" ] && [ "${pid:-0}" -gt 1 ]; do
  for fd in /proc/"$pid"/fd/*; do
    target=$(readlink "$fd" 2> /dev/null) || continue
    case "$target" in */Testing/Temporary/LastTest.log* | */Testing/Temporary/LastTest_*.log*) log="$target" ctest_pid=$pid ;; esac
  done
  pid=$(awk '/^PPid:/ { print $2 }' /proc/"$pid"/status 2> /dev/null || echo 0)
done
if [ -z "$log" ] || [ "${log% (deleted)}" != "$log" ]; then
  echo "no ctest run above this script has its log open: $SELF times the ctest run it is part of; run it through" >&2
  echo "ctest (ctest --test-dir $BUILD), not on its own, and without another ctest in $BUILD beside it" >&2
  exit 1
fi
# The run's wall time so far: the ctest process's age.
ticks=$(getconf CLK_TCK)
started=$(awk '{ sub(/^.*\) /, ""); print $20 }' /proc/"$ctest_pid"/stat)
wall=$(awk -v s="$started" -v t="$ticks" '{ printf "%.0f", $1 - s / t }' /proc/uptime)
budget=$(awk '$1 == "suite" { print $2 }' "$BUDGET_FILE")
if [ -z "$budget" ]; then
  echo "$BUDGET_FILE has no \"suite SECONDS\" line" >&2
  exit 1
fi

# --- the registered tests: labels and timeouts (a ctest in a scratch folder: one in BUILD would start a new log) ---
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
printf 'subdirs("%s")\n' "$(realpath --relative-to="$scratch" "$BUILD")" > "$scratch/CTestTestfile.cmake"
ctest --test-dir "$scratch" --show-only=json-v1 > "$scratch/tests.json"
python3 - "$scratch/tests.json" > "$scratch/registered" << 'PY'
import json, sys
for t in json.load(open(sys.argv[1]))["tests"]:
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    labels = props.get("LABELS", [])
    print(f"{t['name']}\t{labels[0] if labels else '-'}\t{props.get('TIMEOUT', 0)}")
PY

# --- this run's finished tests and their times ---
awk '/^[0-9]+\/[0-9]+ Testing: / { name = $0; sub(/^[0-9]+\/[0-9]+ Testing: /, "", name); next }
     /^Test time = / && name != "" { print name "\t" $4; name = "" }' "$log" > "$scratch/times"

# The summary is also left for ctest's post-test step (CTestCustom.cmake runs show_time_budget.sh), which prints it
# at the end of ctest's own output, the CI log: --output-on-failure shows a passing test's output nowhere.
set +e
summary="$BUILD/Testing/Temporary/time_budget_summary.txt"
python3 - "$scratch/registered" "$scratch/times" "$wall" "$budget" "$SELF" 2>&1 << 'PY' | tee "$summary"
import sys
registered = {}
for line in open(sys.argv[1]):
    name, label, timeout = line.rstrip("\n").split("\t")
    registered[name] = (label, float(timeout))
times = {}
for line in open(sys.argv[2]):
    name, seconds = line.rstrip("\n").split("\t")
    times[name] = float(seconds)
wall, budget, self_name = float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
by_label = {}
for name, seconds in times.items():
    label = registered.get(name, ("-", 0))[0]
    n, total = by_label.get(label, (0, 0.0))
    by_label[label] = (n + 1, total + seconds)
print(f"this run: {wall / 60:.1f} min of wall time so far; the budget is {budget / 60:.0f} min "
      f"({sys.argv[4]} s, tests/time_budget.txt)")
print("test time by label (summed over tests that ran side by side): " +
      ", ".join(f"{label} {total:.0f} s / {n} tests" for label, (n, total) in sorted(by_label.items())))
slowest = sorted(times.items(), key=lambda kv: -kv[1])[:10]
print("the ten slowest tests: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in slowest))
untimed = sorted(name for name, (label, timeout) in registered.items() if timeout <= 0)
failed = False
if untimed:
    print(f"{len(untimed)} test(s) without a TIMEOUT of their own (set one that fits each: one hung test must "
          f"cost minutes, not ctest's --timeout): " + ", ".join(untimed[:20]), file=sys.stderr)
    failed = True
whole = all(name in times for name in registered if name != self_name)
if not whole:
    print(f"{sum(1 for n in registered if n not in times and n != self_name)} registered tests did not run in this "
          f"ctest run (a selection): the budget is not checked")
elif wall > budget:
    print(f"the suite took {wall / 60:.1f} min, past its budget of {budget / 60:.0f} min: make the slowest tests "
          f"above shorter (compress their waits with the flags and hooks they have), run more of them side by side, "
          f"or move a long one to bench/ leaving a shorter test of the same behaviour; raise the budget in "
          f"tests/time_budget.txt only with a reason in the commit", file=sys.stderr)
    failed = True
sys.exit(1 if failed else 0)
PY
status=${PIPESTATUS[0]}
exit "$status"
