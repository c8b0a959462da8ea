#!/usr/bin/env bash
# ctest's post-test step (CTEST_CUSTOM_POST_TEST, written into BUILD/CTestCustom.cmake by tests/CMakeLists.txt):
# prints the summary lint.time_budget left in this run (each label's time, the ten slowest tests) at the end of
# ctest's output, where a person reads a CI log, pass or fail; then removes it, so a later run that did not time
# the suite shows no stale one.
#   show_time_budget.sh BUILD_DIR
summary="$1/Testing/Temporary/time_budget_summary.txt"
[ -f "$summary" ] || exit 0
echo "Suite time (lint.time_budget):"
sed 's/^/  /' "$summary"
rm -f "$summary"
