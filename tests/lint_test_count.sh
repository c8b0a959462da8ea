#!/usr/bin/env bash
# The suite must neither shrink nor pass by skipping: counts, per label, the tests of this ctest run that ran
# and passed, against the floor in tests/test_count_floor.txt ("LABEL COUNT" per line). Fails when a label ran
# whole and fewer of its tests passed than its floor, when fewer are registered than the floor, or when a test
# carries none of the labels or more than one. Raise a floor deliberately when tests are added; lower it only
# with a reason in the commit.
#
# ctest runs it as lint.test_count after every other test it runs (tests/CMakeLists.txt makes it DEPEND on all
# of them), and it reads ctest's log of this run, which ctest writes one finished test at a time (the file the
# ctest process above this script holds open: Testing/Temporary/LastTest.log.tmp, renamed LastTest.log at the
# end). What that log says of a test:
#   - one that never started (no executable, a failed fixture, DISABLED) has an empty start time;
#   - one skipped by SKIP_RETURN_CODE still reads "Test Passed.": a skip is known by the "SKIPPED: <reason>"
#     line that tests/support/skip.sh and skip.hpp print (Catch2 tests exit 0 when they skip, so this is the
#     only mark they leave); a SKIP_REGULAR_EXPRESSION skip reads "Skip regular expression found".
# A label none of whose tests ran (ctest -L unit) or only part of them (-R, -E, -I, --rerun-failed) is not
# checked, and the output says so. Outside CI a label that misses its floor only because tests were skipped
# here makes this test a skip too. Under CI=true the whole suite runs and nothing may be skipped: every label
# must have run whole and reached its floor.
#   lint_test_count.sh BUILD_DIR FLOOR_FILE
set -euo pipefail
export LC_ALL=C  # sort and comm below compare bytes
BUILD="$1" FLOOR="$2"
SELF="lint.test_count"  # this test: still running, so not in the log, and not counted
AFTER="lint.time_budget"  # runs after this one (it times the whole run): not counted either
CI_RUN=0
[ "${CI:-}" = "true" ] && CI_RUN=1
join() { # join a b -> "a, b"; "none" for no words
  local IFS=, words
  words="${*:-none}"
  echo "${words//,/, }"
}

# --- this run's log: the one an ancestor ctest process has open ---
log=""
pid=$PPID
while [ -z "$log" ] && [ "${pid:-0}" -gt 1 ]; do
  for fd in /proc/"$pid"/fd/*; do
    target=$(readlink "$fd" 2> /dev/null) || continue
    case "$target" in */Testing/Temporary/LastTest.log* | */Testing/Temporary/LastTest_*.log*) log="$target" ;; esac
  done
  pid=$(awk '/^PPid:/ { print $2 }' /proc/"$pid"/status 2> /dev/null || echo 0)
done
if [ "${log% (deleted)}" != "$log" ]; then
  echo "this ctest run's log was replaced by another ctest in $BUILD (a \`ctest -N\` there during the run does" >&2
  echo "that): nothing to count; run the suite again without another ctest beside it" >&2
  exit 1
fi
if [ -z "$log" ]; then
  echo "no ctest run above this script has a log open: $SELF counts the results of the ctest run it is part of;" >&2
  echo "run it through ctest (ctest --test-dir $BUILD -L unit), not on its own" >&2
  exit 1
fi

# --- the registered tests, per label ---
# Listed by a ctest in a scratch folder whose only test file reads BUILD's: a ctest in BUILD itself would start
# a log of its own there, truncating the one this run is writing.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
printf 'subdirs("%s")\n' "$(realpath --relative-to="$scratch" "$BUILD")" > "$scratch/CTestTestfile.cmake"
registered() { ctest --test-dir "$scratch" -N "$@" | sed -n 's/^ *Test *#[0-9]*: //p'; }
registered > "$scratch/all"
if [ ! -s "$scratch/all" ]; then
  echo "no tests registered in $BUILD (ctest -N lists none)" >&2
  exit 1
fi
labels=()
declare -A floors
while read -r label floor; do
  [ -z "$label" ] || [ "${label:0:1}" = "#" ] && continue
  labels+=("$label")
  floors["$label"]=$floor
  registered -L "^${label}\$" > "$scratch/label.$label"
done < "$FLOOR"

# --- this run's outcome of each test that finished: passed, failed, skipped or notrun (the last run wins) ---
awk -f "$(dirname "${BASH_SOURCE[0]}")/ctest_log_outcomes.awk" "$log" > "$scratch/outcomes"
declare -A outcome
while IFS=$'\t' read -r result name; do outcome["$name"]=$result; done < "$scratch/outcomes"

# --- per label: what ran, what passed ---
failed=0
short_by_skips=()
checked=()
unchecked=()
for label in "${labels[@]}"; do
  floor=${floors["$label"]}
  n=0 ran=0 passed=0 failures=0 skipped=0 notrun=0
  skipped_names=()
  while IFS= read -r name; do
    [ "$name" = "$SELF" ] || [ "$name" = "$AFTER" ] && continue
    n=$((n + 1))
    case "${outcome["$name"]:-}" in
      passed) passed=$((passed + 1)) ;;
      failed) failures=$((failures + 1)) ;;
      skipped)
        skipped=$((skipped + 1))
        ((skipped > 5)) || skipped_names+=("'$name'")
        ;;
      notrun) notrun=$((notrun + 1)) ;;
      *) continue ;;
    esac
    ran=$((ran + 1))
  done < "$scratch/label.$label"
  if [ "$n" -lt "$floor" ]; then
    echo "label '$label': $n tests registered, the floor is $floor (a test vanished? see $FLOOR)" >&2
    failed=1
    continue
  fi
  if [ "$ran" -lt "$n" ]; then
    unchecked+=("$label")
    if ((CI_RUN)); then
      echo "label '$label': $ran of its $n tests ran before $SELF; under CI=true the whole suite must run," \
        "and $SELF must run after every other test (tests/CMakeLists.txt)" >&2
      failed=1
    elif [ "$ran" -eq 0 ]; then
      echo "label '$label': not run in this ctest run (not selected): not checked"
    else
      echo "label '$label': only $ran of its $n tests ran in this ctest run (a selection: -R, -E, -I," \
        "--rerun-failed): not checked"
    fi
    continue
  fi
  checked+=("$label")
  summary="$passed of $n passed"
  ((failures)) && summary+=", $failures failed"
  ((notrun)) && summary+=", $notrun did not start"
  ((skipped)) && summary+=", $skipped skipped"
  if [ "$passed" -ge "$floor" ]; then
    echo "label '$label': $summary (floor $floor)"
  elif ((!CI_RUN)) && [ $((passed + skipped)) -ge "$floor" ]; then
    echo "label '$label': $summary; the floor is $floor, missed only by the tests skipped here" \
      "(${skipped_names[*]}$( ((skipped > 5)) && echo " ..."))"
    short_by_skips+=("$label")
  else
    echo "label '$label': $summary; the floor is $floor (tests that failed, did not start or were skipped" \
      "do not count$( ((CI_RUN)) && echo "; under CI=true nothing may be skipped"))" >&2
    failed=1
  fi
done

# --- every test carries exactly one of the labels ---
cat "${labels[@]/#/$scratch/label.}" | sort | uniq -d > "$scratch/twice"
sort -u "${labels[@]/#/$scratch/label.}" | comm -23 <(sort -u "$scratch/all") - > "$scratch/none"
if [ -s "$scratch/none" ] || [ -s "$scratch/twice" ]; then
  echo "every test must carry exactly one of the labels in $FLOOR ($(join "${labels[@]}")):" >&2
  [ -s "$scratch/none" ] && echo "  none: $(paste -sd, "$scratch/none" | sed 's/,/, /g')" >&2
  [ -s "$scratch/twice" ] && echo "  more than one: $(paste -sd, "$scratch/twice" | sed 's/,/, /g')" >&2
  failed=1
fi

echo "labels checked: $(join "${checked[@]}"); not checked (not run whole in this ctest run): $(join "${unchecked[@]}")"
echo "results read from $log"
if ((failed)); then exit 1; fi
if ((${#short_by_skips[@]})); then
  echo "SKIPPED: $(join "${short_by_skips[@]}") reached the floor only counting the tests skipped here"
  exit 77
fi
