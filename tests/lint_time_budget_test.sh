#!/usr/bin/env bash
# lint.time_budget on real ctest runs of a scratch project: three labelled tests of 0, 1 and 2 s run side by side,
# then the budget script last (DEPENDS on them), as tests/CMakeLists.txt wires it. With a budget of 1 s the run
# fails, and says the budget passed with the labels' times and the slowest tests first; with 60 s it passes and
# prints the same figures at the end of ctest's own output; a test without a TIMEOUT fails it; a selection (-R) is timed but never failed.
#   lint_time_budget_test.sh LINT_TIME_BUDGET_SH
set -uo pipefail
SCRIPT=$1
SHOW="$(dirname "$SCRIPT")/show_time_budget.sh"   # ctest's post-test step, as tests/CMakeLists.txt wires it
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fails=0
fail() { echo "FAILED: $*"; fails=$((fails + 1)); }
# project NAME BUDGET [UNTIMED]: a scratch project whose budget is BUDGET seconds (UNTIMED: one test without TIMEOUT).
project() {
  local dir="$W/$1"
  mkdir -p "$dir/src"
  echo "suite $2" > "$dir/src/time_budget.txt"
  cat > "$dir/src/CMakeLists.txt" << CMAKE
cmake_minimum_required(VERSION 3.16)
project(scratch NONE)
enable_testing()
add_test(NAME quick COMMAND sh -c "exit 0")
add_test(NAME one_second COMMAND sleep 1)
add_test(NAME two_seconds COMMAND sleep 2)
set_tests_properties(quick PROPERTIES LABELS "unit" TIMEOUT 10)
set_tests_properties(one_second two_seconds PROPERTIES LABELS "integration" TIMEOUT 10)
add_test(NAME lint.time_budget COMMAND $SCRIPT \${CMAKE_BINARY_DIR} \${CMAKE_SOURCE_DIR}/time_budget.txt)
set_tests_properties(lint.time_budget PROPERTIES LABELS "unit" TIMEOUT 60 DEPENDS "quick;one_second;two_seconds")
file(WRITE \${CMAKE_BINARY_DIR}/CTestCustom.cmake "set(CTEST_CUSTOM_POST_TEST \\"$SHOW \${CMAKE_BINARY_DIR}\\")")
CMAKE
  [ "${3:-}" = untimed ] && echo 'add_test(NAME untimed COMMAND true)' >> "$dir/src/CMakeLists.txt"
  cmake -S "$dir/src" -B "$dir/build" > "$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
}

project over 1
ctest --test-dir "$W/over/build" -j 4 --output-on-failure > "$W/over.out" 2>&1 && fail "a run over its budget passed"
grep -q "past its budget of 0 min" "$W/over.out" || fail "no 'past its budget' message: $(cat "$W/over.out")"
grep -q "the ten slowest tests: two_seconds 2 s, one_second 1 s, quick 0 s" "$W/over.out" ||
  fail "the slowest tests are not listed, slowest first: $(grep -m1 slowest "$W/over.out")"
grep -q "test time by label (summed over tests that ran side by side): integration 3 s / 2 tests, unit 0 s / 1 tests" \
  "$W/over.out" || fail "the labels' times are not printed: $(grep -m1 'by label' "$W/over.out")"
grep -q "tests failed out of 4" "$W/over.out" || fail "the budget test itself did not fail"

project within 60
# Not -V: a passing test's output shows nowhere, so the summary reaches ctest's output (a file, as CI's log may be)
# by the post-test step alone.
ctest --test-dir "$W/within/build" -j 4 --output-on-failure > "$W/within.out" 2>&1 ||
  fail "a run within its budget failed: $(cat "$W/within.out")"
grep -A3 "^Suite time (lint.time_budget):" "$W/within.out" | grep -q "the ten slowest tests: two_seconds" ||
  fail "a passing run does not list its slowest tests at the end of ctest's output: $(tail -5 "$W/within.out")"

project untimed 60 untimed
ctest --test-dir "$W/untimed/build" --output-on-failure > "$W/untimed.out" 2>&1 && fail "a test without TIMEOUT passed"
grep -q "without a TIMEOUT of their own .*: untimed" "$W/untimed.out" || fail "the untimed test is not named"

ctest --test-dir "$W/over/build" -R 'quick|lint' --output-on-failure -V > "$W/part.out" 2>&1 ||
  fail "a selection was failed on the whole suite's budget: $(cat "$W/part.out")"
grep -q "did not run in this ctest run (a selection): the budget is not checked" "$W/part.out" ||
  fail "a selection does not say the budget is not checked"
echo "$((fails == 0 ? 1 : 0)) passed, $((fails == 0 ? 0 : 1)) failed"
[ "$fails" = 0 ]
