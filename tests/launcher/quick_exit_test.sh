#!/bin/bash
# Quick exit (docs/multi-node.md#quick-exit): a worker that dies of a lost peer's collective error while its failure
# would be restarted ends without Python's teardown, and loses nothing the exit's own steps finish
# (quick_exit_job.py: two ranks; rank 1 closes its process group, rank 0's next all_reduce fails):
#   quick: --max-restarts 2, rank 0 dies of the lost peer in every attempt; attempt 1 runs in standbys (attempt 0
#          holds until they are up). Attempts 0 and 1 end quickly (Python's teardown did not run to its end), with
#          their text and gzip files whole (the teardown leaves a gzip file without its trailer), their non-daemon
#          thread joined, atexit and a C library's atexit
#          handler run, exit code 1 and the traceback; the last attempt (no restart left) keeps the teardown.
#   own:   rank 0's own exception (attempt 0) and sys.exit(3) (attempt 1) keep the teardown and their exit codes.
#   zip:   a ZipFile left open: the quick exit calls its close(), which writes its directory (Python's teardown
#          runs only its __del__, which does not), and the zip is whole.
#   off:   --no-quick-exit: attempt 0 keeps the teardown.
# Usage: quick_exit_test.sh MESHRUN VENV_BIN C_ATEXIT_LIB
MESHRUN=$1 VENV_BIN=$2 C_ATEXIT_LIB=$3
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
  (cd "$W/$name" && PATH="$VENV_BIN:$PATH" PYTHONPATH="$HERE" MESHRUN_TEST_C_ATEXIT="$C_ATEXIT_LIB" "$MESHRUN" \
    --standalone --nproc-per-node 2 "${flags[@]}" "$HERE/quick_exit_job.py" "$W/$name" --ends "$ends" "$@" \
    > "$W/$name/job.log" 2>&1)
  echo $? > "$W/$name/rc"
}

expect_rc() {  # expect_rc NAME RC
  [ "$(cat "$W/$1/rc")" = "$2" ] || { fail "$1" "meshrun exited $(cat "$W/$1/rc"), expected $2"; cat "$W/$1/job.log"; }
}

teardown_ran() { [ -e "$W/$1/teardown_$2" ]; }

exit_steps_done() {  # exit_steps_done NAME ATTEMPT: what the exit's steps finish, all there
  local d=$W/$1 a=$2
  [ "$(cat "$d/text_$a" 2> /dev/null)" = "text of attempt $a" ] || fail "$1" "attempt $a: its open text file lost data"
  [ "$(cat "$d/thread_$a" 2> /dev/null)" = joined ] || fail "$1" "attempt $a: its non-daemon thread was not joined"
  [ -e "$d/atexit_$a" ] || fail "$1" "attempt $a: atexit did not run"
  [ -e "$d/c_atexit_$a" ] || fail "$1" "attempt $a: the C library's atexit handler did not run"
}

closed_whole() {  # closed_whole NAME ATTEMPT: the gzip file a quick exit closes (Python's teardown leaves it without
  # its trailer), and the ZipFile when there is one (the teardown never writes its directory)
  local d=$W/$1 a=$2
  [ "$("$VENV_BIN/python" -c 'import gzip, sys; print(gzip.open(sys.argv[1], "rt").read())' "$d/gzip_$a.gz" 2>&1)" = \
    "zipped by attempt $a" ] || fail "$1" "attempt $a: its open gzip file was not closed whole"
  if [ -e "$d/zip_$a.zip" ]; then
    [ "$("$VENV_BIN/python" -c 'import zipfile, sys; print(zipfile.ZipFile(sys.argv[1]).read("entry.txt").decode())' \
      "$d/zip_$a.zip" 2>&1)" = "archived by attempt $a" ] || fail "$1" "attempt $a: its open ZipFile is not whole"
  fi
}

# Two jobs at a time, each in its own folder (four jobs of two ranks at once would starve the standbys). The standbys
# start at once (--standby-start now), not into an idle core: on a loaded machine none may sit idle, and the held
# attempt 0 would wait for them forever.
job quick lost_peer,lost_peer,lost_peer --max-restarts 2 --standby-start now -- --hold &
job off lost_peer,lost_peer --max-restarts 1 --no-quick-exit --no-standby -- &
wait
job own raise,sys_exit_3,lost_peer --max-restarts 2 --no-standby -- &
job zip lost_peer,lost_peer --max-restarts 1 --no-standby -- --zip &
wait

expect_rc quick 1
grep -qE "round 1: local ranks? 0(,1)? started from standby workers" "$W/quick/job.log" ||
  { fail quick "attempt 1 did not start from a standby"; cat "$W/quick/job.log"; }
for a in 0 1 2; do
  exit_steps_done quick $a
  grep -q "attempt $a: ending with lost_peer" "$W/quick/job.log" || fail quick "attempt $a did not reach its end"
done
for a in 0 1; do
  ! teardown_ran quick $a || fail quick "attempt $a (a lost peer, a restart to come) went through Python's teardown"
  closed_whole quick $a
done
teardown_ran quick 2 || fail quick "the last attempt (no restart left) skipped Python's teardown"
[ "$(grep -cE 'Connection (closed|reset) by peer' "$W/quick/job.log")" -ge 3 ] ||
  { fail quick "not every attempt printed the lost peer's traceback"; cat "$W/quick/job.log"; }
[ "$(grep -c '^  exit: *exit code 1$' "$W/quick/job.log")" = 3 ] ||
  { fail quick "not every attempt's failure summary says exit code 1"; cat "$W/quick/job.log"; }

expect_rc off 1
exit_steps_done off 0
teardown_ran off 0 || fail off "--no-quick-exit: attempt 0 skipped Python's teardown"

expect_rc own 1
for a in 0 1 2; do
  exit_steps_done own $a
  teardown_ran own $a || fail own "attempt $a skipped Python's teardown"
done
grep -q "RuntimeError: quick exit job, attempt 0" "$W/own/job.log" || fail own "attempt 0: no traceback"
grep -q '^  exit: *exit code 3$' "$W/own/job.log" || { fail own "attempt 1 did not exit 3"; cat "$W/own/job.log"; }

expect_rc zip 1
exit_steps_done zip 0
! teardown_ran zip 0 || fail zip "attempt 0 (a lost peer, a ZipFile's close() to call) went through the teardown"
closed_whole zip 0

[ "$fails" = 0 ] && echo "PASS: workers that die of a lost peer with a restart to come skip the teardown and lose nothing; the rest keep it"
exit $((fails > 0))
