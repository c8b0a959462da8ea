#!/usr/bin/env bash
# The reader lint.test_count trusts (tests/ctest_log_outcomes.awk), on real ctest logs: a scratch project with a
# test that passes, one that fails, one skipped by SKIP_RETURN_CODE (printing "SKIPPED: ..." as skip.sh does),
# one skipped by SKIP_REGULAR_EXPRESSION, one whose program does not exist, a DISABLED one, and one whose output
# pretends to be ctest's own verdict; then the log of a run of part of them (-R). Each must read as what it is.
#   lint_test_count_parser_test.sh CTEST_LOG_OUTCOMES_AWK
set -uo pipefail
AWK_PROGRAM=$1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fails=0
fail() { echo "FAILED: $*"; fails=$((fails + 1)); }
mkdir -p "$W/project"
cat > "$W/project/CMakeLists.txt" << 'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(scratch NONE)
enable_testing()
add_test(NAME passes COMMAND sh -c "exit 0")
add_test(NAME fails COMMAND sh -c "echo trying; exit 1")
add_test(NAME skipped_by_code COMMAND sh -c "echo 'SKIPPED: no IPv6 loopback here'; exit 77")
set_tests_properties(skipped_by_code PROPERTIES SKIP_RETURN_CODE 77)
add_test(NAME skipped_by_regex COMMAND sh -c "echo 'chromium missing: not run here'")
set_tests_properties(skipped_by_regex PROPERTIES SKIP_REGULAR_EXPRESSION "not run here")
add_test(NAME no_program COMMAND /nonexistent/meshrun-test-program)
add_test(NAME disabled COMMAND sh -c "exit 0")
set_tests_properties(disabled PROPERTIES DISABLED TRUE)
add_test(NAME fails_but_prints_a_verdict COMMAND sh -c "echo 'Test Passed.'; echo '  SKIPPED: no'; exit 1")
CMAKE
cmake -S "$W/project" -B "$W/build" > "$W/configure.log" 2>&1 || { cat "$W/configure.log"; exit 1; }
# expect LOG NAME OUTCOME: the reader says OUTCOME for NAME in LOG.
expect() {
  local got
  got=$(awk -F'\t' -v n="$2" '$2 == n { print $1 }' "$1")
  [ "$got" = "$3" ] || fail "'$2' read as '${got:-nothing}', it $3"
}

ctest --test-dir "$W/build" > "$W/ctest.out" 2>&1
awk -f "$AWK_PROGRAM" "$W/build/Testing/Temporary/LastTest.log" > "$W/whole"
expect "$W/whole" passes passed
expect "$W/whole" fails failed
expect "$W/whole" skipped_by_code skipped
expect "$W/whole" skipped_by_regex skipped
expect "$W/whole" no_program notrun
expect "$W/whole" disabled notrun
expect "$W/whole" fails_but_prints_a_verdict failed
[ "$(wc -l < "$W/whole")" = 7 ] || fail "the whole run's log read as $(wc -l < "$W/whole") tests, not 7: $(cat "$W/whole")"

# A run of part of them: only those are in its log.
ctest --test-dir "$W/build" -R '^(passes|fails)$' > "$W/ctest.part.out" 2>&1
awk -f "$AWK_PROGRAM" "$W/build/Testing/Temporary/LastTest.log" > "$W/part"
expect "$W/part" passes passed
expect "$W/part" fails failed
[ "$(wc -l < "$W/part")" = 2 ] || fail "the partial run's log read as $(wc -l < "$W/part") tests, not 2: $(cat "$W/part")"
echo "$((fails == 0 ? 1 : 0)) passed, $((fails == 0 ? 0 : 1)) failed"
[ "$fails" = 0 ]
