#!/usr/bin/env bash
# The suite must not shrink by accident: compares the number of registered ctest tests per label with the
# floor in tests/test_count_floor.txt ("LABEL COUNT" per line), and fails when a label has fewer or a test
# has no label. Raise the floor deliberately when tests are added; lower it only with a reason in the commit.
#   lint_test_count.sh BUILD_DIR FLOOR_FILE
set -euo pipefail
BUILD="$1" FLOOR="$2"
count() { ctest --test-dir "$BUILD" -N "$@" | grep -c 'Test *#' || true; }
total=$(count)
labelled=0
failed=0
while read -r label floor; do
  [ -z "$label" ] || [ "${label:0:1}" = "#" ] && continue
  n=$(count -L "^${label}\$")
  labelled=$((labelled + n))
  if [ "$n" -lt "$floor" ]; then
    echo "label '$label': $n tests registered, the floor is $floor (a test vanished? see $FLOOR)" >&2
    failed=1
  else
    echo "label '$label': $n tests (floor $floor)"
  fi
done < "$FLOOR"
if [ "$labelled" -ne "$total" ]; then
  echo "$((total - labelled)) of $total tests carry none of the labels in $FLOOR (or more than one)" >&2
  failed=1
fi
exit "$failed"
