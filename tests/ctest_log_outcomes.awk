# Reads a ctest log (Testing/Temporary/LastTest.log, or the .tmp a run still writes) and prints one line per
# test that finished in it: "OUTCOME<TAB>NAME", OUTCOME one of passed, failed, skipped, notrun (the last run of a
# name wins). What the log says of a test:
#   - one that never started (no executable, a failed fixture, DISABLED) has an empty start time: notrun;
#   - one skipped by SKIP_RETURN_CODE still reads "Test Passed.": a skip is known by the "SKIPPED: <reason>" line
#     that tests/support/skip.sh and skip.hpp print; a SKIP_REGULAR_EXPRESSION skip reads "Skip regular
#     expression found".
# Used by lint_test_count.sh; tested on real ctest logs by lint_test_count_parser_test.sh.
  function finish() {
    if (notrun) outcome = "notrun"
    else if (status == "failed") outcome = "failed"
    else if (skipped) outcome = "skipped"
    else if (status == "passed") outcome = "passed"
    else outcome = "failed"
    result[name] = outcome
    name = ""
  }
  in_output { if ($0 == "<end of output>") in_output = 0; else if ($0 ~ /^[ \t]*SKIPPED: /) skipped = 1; next }
  /^[0-9]+\/[0-9]+ Testing: / {
    name = $0; sub(/^[0-9]+\/[0-9]+ Testing: /, "", name)
    status = ""; skipped = 0; notrun = 0; rule = 0; next
  }
  name == "" { next }
  index($0, "\"" name "\" start time:") == 1 { if ($0 ~ /start time: *$/) notrun = 1; next }
  $0 == "Output:" { rule = 1; next }
  rule { rule = 0; if ($0 ~ /^-+$/) { in_output = 1; next } }
  $0 == "Test Passed." || $0 == "Test Pass Reason:" { status = "passed"; next }
  $0 == "Test Failed." || $0 == "Test Fail Reason:" { status = "failed"; next }
  /^Skip regular expression found/ { skipped = 1; next }
  index($0, "\"" name "\" end time:") == 1 { finish() }
  END { for (n in result) print result[n] "\t" n }
