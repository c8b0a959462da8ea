#!/bin/bash
# A native (non-Python) worker for hang_test.sh's native scenario: it ignores SIGTERM (it only notes it in
# OUT/term.<rank>), so stopping it takes the whole --shutdown-timeout. Attempt 0 records its pid in
# OUT/a0.<rank> and waits forever; attempt 1 records OUT/a1.<rank> and exits 0. Usage: term_ignoring_worker.sh OUT
trap 'touch "$1/term.$RANK"' TERM
if [ "$TORCHELASTIC_RESTART_COUNT" != 0 ]; then touch "$1/a1.$RANK"; exit 0; fi
echo $$ > "$1/.a0.$RANK" && mv "$1/.a0.$RANK" "$1/a0.$RANK"
while true; do sleep 0.2; done
