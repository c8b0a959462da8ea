#!/bin/bash
# Quick exit (docs/multi-node.md#quick-exit): a worker that dies of an uncaught exception while its failure would be
# restarted ends without Python's teardown, and loses nothing the exit's own steps finish (quick_exit_job.py):
#   quick:     --max-restarts 2, every attempt raises; attempt 1 runs in a standby (attempt 0 holds until it is up).
#              Attempts 0 and 1 end quickly (the __del__ only the teardown runs did not run), with their text and
#              gzip files whole, their non-daemon thread joined, atexit run, exit code 1 and the traceback; the
#              last attempt (no restart left) keeps Python's teardown.
#   off:       --no-quick-exit: attempt 0 keeps the teardown.
#   sys_exit:  sys.exit(3) in attempt 0 keeps the teardown and its exit code.
# Usage: quick_exit_test.sh MESHRUN VENV_BIN
MESHRUN=$1 VENV_BIN=$2
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fails=0
fail() { echo "FAILED ($1): ${*:2}"; fails=$((fails + 1)); }

job() {  # job NAME ENDS [MESHRUN FLAGS...] -- [JOB FLAGS...]: output in $W/NAME/job.log, exit code in $W/NAME/rc
  local name=$1 ends=$2 flags=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  mkdir -p "$W/$name"
  (cd "$W/$name" && PATH="$VENV_BIN:$PATH" PYTHONPATH="$HERE" "$MESHRUN" --standalone --nproc-per-node 1 \
    "${flags[@]}" "$HERE/quick_exit_job.py" "$W/$name" --ends "$ends" "$@" > "$W/$name/job.log" 2>&1)
  echo $? > "$W/$name/rc"
}

expect_rc() {  # expect_rc NAME RC
  [ "$(cat "$W/$1/rc")" = "$2" ] || { fail "$1" "meshrun exited $(cat "$W/$1/rc"), expected $2"; cat "$W/$1/job.log"; }
}

teardown_ran() { [ -e "$W/$1/teardown_$2" ]; }

exit_steps_done() {  # exit_steps_done NAME ATTEMPT: what Python's exit steps finish, all there
  local d=$W/$1 a=$2
  [ "$(cat "$d/text_$a" 2> /dev/null)" = "text of attempt $a" ] || fail "$1" "attempt $a: its open text file lost data"
  [ "$(cat "$d/thread_$a" 2> /dev/null)" = joined ] || fail "$1" "attempt $a: its non-daemon thread was not joined"
  [ -e "$d/atexit_$a" ] || fail "$1" "attempt $a: atexit did not run"
}

# The jobs run side by side (each in its own folder). The standby starts at once (--standby-start now), not into an
# idle core: on a loaded machine none may sit idle, and the held attempt 0 would wait for it forever.
job quick raise,raise,raise --max-restarts 2 --standby-start now -- --hold &
job off raise,raise --max-restarts 1 --no-quick-exit --no-standby -- &
job sys_exit sys_exit_3,raise --max-restarts 1 --no-standby -- &
wait
expect_rc quick 1
grep -q "round 1: local rank 0 started from standby workers" "$W/quick/job.log" ||
  { fail quick "attempt 1 did not start from a standby"; cat "$W/quick/job.log"; }
for a in 0 1; do
  exit_steps_done quick $a
  ! teardown_ran quick $a || fail quick "attempt $a (a restart to come) went through Python's teardown"
  [ "$("$VENV_BIN/python" -c 'import gzip, sys; print(gzip.open(sys.argv[1], "rt").read())' "$W/quick/zip_$a.gz" 2>&1)" = \
    "zipped by attempt $a" ] || fail quick "attempt $a: its open gzip file was not closed whole"
  grep -q "RuntimeError: quick exit job, attempt $a" "$W/quick/job.log" || fail quick "attempt $a: no traceback"
done
exit_steps_done quick 2
teardown_ran quick 2 || fail quick "the last attempt (no restart left) skipped Python's teardown"
[ "$(grep -c '^  exit: *exit code 1$' "$W/quick/job.log")" = 3 ] ||
  { fail quick "not every attempt's failure summary says exit code 1"; cat "$W/quick/job.log"; }

expect_rc off 1
exit_steps_done off 0
teardown_ran off 0 || fail off "--no-quick-exit: attempt 0 skipped Python's teardown"

expect_rc sys_exit 1
teardown_ran sys_exit 0 || fail sys_exit "sys.exit(3) skipped Python's teardown"
grep -q '^  exit: *exit code 3$' "$W/sys_exit/job.log" || { fail sys_exit "attempt 0 did not exit 3"; cat "$W/sys_exit/job.log"; }

[ "$fails" = 0 ] && echo "PASS: failed workers with a restart to come skip the teardown and lose nothing; the rest keep it"
exit $((fails > 0))
