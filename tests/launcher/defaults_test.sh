#!/bin/bash
# Right by default (docs/progress.md, "Stuck or busy"): jobs as people run them, an unmodified 3-rank Gloo
# script (default_jobs.py), every hang flag at its default unless the row says otherwise. A healthy job must
# end 0 as under torchrun; a stuck rank must be named hung. The rows given run side by side (separate jobs,
# at once: the suite's time), each checked on its own:
#   save        (defaults) rank 0 writes a checkpoint for 100 s at 20 MB/s while ranks 1-2 wait in barrier():
#               ends 0, exactly one "late" line naming rank 0, the barrier and the save's line, no restart,
#               no hang; while it saves, the daemon's status and /metrics show rank 0 late
#   eval        (defaults) rank 0 evaluates for 100 s while the others wait in all_reduce: ends 0, a late line
#   lock        (defaults) rank 2 blocks on a lock before collective #2: named hung (never entered #2, idle),
#               with its stack; the job ends 1 (--max-restarts 0)
#   compile     (--hang-floor 10) rank 1 warms up 25 s before collective #1: ends 0, a late line
#   dataloader  (--hang-floor 10) rank 0 waits 25 s on its busy DataLoader workers: ends 0, a late line
#               naming its 3 processes
#   socket      (--hang-floor 10) rank 2 blocks on a silent socket before collective #1: named hung
#   spin        (--hang-floor 10 --hang-busy-timeout 30) rank 1 spins forever: named late at the budget, then
#               hung past the busy timeout, the job ends 1
# Waiting on the world outside the job (late or hung: the rank is idle, but its wait can end by itself):
#   http        (defaults) rank 0 waits 90 s for a slow service's reply (outside_world.py) while ranks 1-2 wait in
#               barrier(): ends 0, a late line naming the service's address, HTTP, and the call
#   poll, retry (--hang-floor 10) rank 0 polls 25 s for a file an outside process writes / sleeps 25 s in a retry
#               loop: ends 0, late, "sleeps"
#   child       (--hang-floor 10) rank 0 waits on a child that waits 25 s on the service: ends 0, late, naming the child
#   download    (--hang-floor 10) rank 0 waits on its own thread, downloading at 16 kB/s for 25 s: ends 0, late,
#               naming the thread
#   pipe        (--hang-floor 10) rank 0 reads a named pipe an outside process feeds for 25 s: ends 0, late, naming
#               the feeder
# Deadlocks (proof): named hung at the budget, the job ends 1:
#   event       (--hang-floor 10) rank 2 waits on an Event nothing sets
#   mismatch    (--hang-floor 10) rank 1 calls broadcast where the others all_reduce
#   cycle       (--hang-floor 10) ranks 0 and 1 call two groups' collectives in opposite orders
# Timings are printed, never asserted (bench/faults/hang_defaults.sh measures them against torchrun).
# Usage: defaults_test.sh "ROW [ROW...]" MESHRUN DAEMON VENV_BIN
ROWS=$1 MESHRUN=$2 DAEMON=$3 VENV_BIN=$4
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2> /dev/null; done; wait 2> /dev/null; rm -rf "$W"; }
trap cleanup EXIT
FAILS=0
fail() { echo "FAIL ($1): ${*:2}"; FAILS=$((FAILS + 1)); }

# The save row runs against a meshrun-rendezvous of its own with its HTTP view: status and /metrics are read
# while rank 0 is late.
start_daemon() {
  "$DAEMON" --host 127.0.0.1 --port 0 --http-port 0 > "$W/daemon.out" 2> "$W/daemon.err" &
  pids+=($!)
  for _ in $(seq 100); do grep -q '^http on ' "$W/daemon.out" && break; sleep 0.1; done
  ENDPOINT=$(sed -n 's/^listening on //p' "$W/daemon.out")
  HTTP_PORT=$(sed -n 's/^http on .*:\([0-9]*\)$/\1/p' "$W/daemon.out")
  [ -n "$HTTP_PORT" ] || { echo "FAIL: the daemon did not start: $(cat "$W/daemon.out" "$W/daemon.err")"; exit 1; }
}
http_get() {
  exec 3<> "/dev/tcp/127.0.0.1/$HTTP_PORT" || return 1
  printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' "$1" >&3
  cat <&3
  exec 3<&-
}

# start ROW: its job in the background; $W/ROW/{out,job.log,rc}.
start() {
  local row=$1 seconds flags=(--standalone)
  case $row in
    save | eval) seconds=100 ;;
    http) seconds=90 ;;
    lock) seconds=0 ;;
    compile | dataloader | poll | retry | child | download | pipe) seconds=25 flags+=(--hang-floor 10) ;;
    socket | event | mismatch | cycle) seconds=0 flags+=(--hang-floor 10) ;;
    spin) seconds=0 flags+=(--hang-floor 10 --hang-busy-timeout 30) ;;
    *) echo "unknown row $row"; exit 2 ;;
  esac
  if [ "$row" = save ]; then
    start_daemon
    flags=(--rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" --rdzv-id defaults-save)
  fi
  mkdir -p "$W/$row/out"
  start_outside "$row" "$seconds"
  (
    PATH="$VENV_BIN:$PATH" SERVICE_PORT="$(cat "$W/$row/port" 2> /dev/null)" FEED="$W/$row/feed" \
      "$MESHRUN" "${flags[@]}" --nproc-per-node 3 "$HERE/default_jobs.py" "$row" "$seconds" \
      "$W/$row/out" > "$W/$row/job.log" 2>&1
    echo $? > "$W/$row/rc"
  ) &
  pids+=($!)
}

# start_outside ROW SECONDS: what the row's rank 0 waits on, outside the job (outside_world.py).
start_outside() {
  local row=$1 seconds=$2 world=("$VENV_BIN/python" "$HERE/outside_world.py")
  case $row in
    http | child | download)
      "${world[@]}" service "$W/$row/port" "$seconds" &
      pids+=($!)
      for _ in $(seq 100); do [ -s "$W/$row/port" ] && return; sleep 0.1; done
      echo "FAIL: the outside service did not start"; exit 1 ;;
    poll) "${world[@]}" flag "$W/$row/out" "$seconds" & pids+=($!) ;;
    pipe) mkfifo "$W/$row/feed"; "${world[@]}" feed "$W/$row/feed" "$seconds" & pids+=($!) ;;
  esac
}

# Rank 0 of the save row is late once the verdict came (60 s after the barrier began): status and /metrics say so.
watch_save() {
  local seen_status=0 seen_metric=0
  for _ in $(seq 1500); do
    [ -f "$W/save/rc" ] && break
    if [ $seen_status = 0 ] && "$DAEMON" status --endpoint "$ENDPOINT" --json 2> /dev/null |
      "$VENV_BIN/python" -c 'import json,sys
s = json.load(sys.stdin)
late = [r for run in s["runs"] for n in run["nodes"] for r in n["ranks"] if r.get("late")]
sys.exit(0 if [r["rank"] for r in late] == [0] and "is late" in late[0]["late_reason"] else 1)'; then
      seen_status=1
      "$DAEMON" status --endpoint "$ENDPOINT" | grep -q "LATE" || fail save "status's table does not flag rank 0 LATE"
    fi
    if [ $seen_metric = 0 ] && http_get /metrics 2> /dev/null | grep -q '^meshrun_rank_late{.*rank="0".*} 1'; then
      seen_metric=1
    fi
    [ $seen_status = 1 ] && [ $seen_metric = 1 ] && return
    sleep 0.1
  done
  [ $seen_status = 1 ] || fail save "the daemon's status never showed rank 0 late (and only rank 0)"
  [ $seen_metric = 1 ] || fail save "/metrics never had meshrun_rank_late{rank=\"0\"} 1"
}

# healthy ROW LATE_RANK TEXT: ends 0, every rank done, late lines name the rank and TEXT, no hang.
healthy() {
  local row=$1 rank=$2 text=$3 log="$W/$1/job.log"
  [ "$(cat "$W/$row/rc")" = 0 ] || fail "$row" "the job ended $(cat "$W/$row/rc"), expected 0 (as under torchrun)"
  for r in 0 1 2; do [ -f "$W/$row/out/done.$r" ] || fail "$row" "rank $r did not end cleanly"; done
  grep -q "hang:\|worker hung\|restarting" "$log" && fail "$row" "a hang or a restart: $(grep -m2 'hang:\|worker hung\|restarting' "$log")"
  grep -q "^meshrun: .* is late: " "$log" || fail "$row" "no late line"
  grep "^meshrun: .* is late: " "$log" | grep -v "^meshrun: rank $rank (" > /dev/null && fail "$row" "a late line names another rank"
  grep -Eq "^meshrun: rank $rank \([^)]*\) is late: $text" "$log" || fail "$row" "the late line does not read '$text'"
}
# hung ROW RANK TEXT: ends 1, the verdict names the rank and TEXT, the worker's summary names it.
hung() {
  local row=$1 rank=$2 text=$3 log="$W/$1/job.log" verdict
  verdict=$(grep -m1 "^meshrun: hang: " "$log")
  [ "$(cat "$W/$row/rc")" = 1 ] || fail "$row" "the job ended $(cat "$W/$row/rc"), expected 1 (hung, --max-restarts 0)"
  echo "$verdict" | grep -Eq "^meshrun: hang: rank $rank \(.*$text" || fail "$row" "the verdict is not 'rank $rank ... $text': $verdict"
  grep -q "meshrun: worker hung (first failure, attempt 0)" "$log" || fail "$row" "no summary of the hung worker"
  grep -A2 "meshrun: worker hung" "$log" | grep -q "rank:       $rank " || fail "$row" "the summary does not name rank $rank"
}

# outside ROW TEXT: a healthy row whose rank 0 waited outside the job: ends 0, its late line says on what.
outside() {
  local row=$1 text=$2
  healthy "$row" 0 "it has not entered barrier #[0-9]+ of group 0 \(ranks 0-2\) for [0-9]+ s while ranks 1,2 wait; it $text"
}
# deadlock ROW VERDICT: named hung at the budget, with VERDICT (a regular expression), the job ends 1.
deadlock() {
  local row=$1 text=$2 log="$W/$1/job.log"
  [ "$(cat "$W/$row/rc")" = 1 ] || fail "$row" "the job ended $(cat "$W/$row/rc"), expected 1 (hung, --max-restarts 0)"
  grep -Eq "^meshrun: hang: $text" "$log" || fail "$row" "no verdict '$text': $(grep -m1 '^meshrun: hang: ' "$log")"
  grep -q "meshrun: worker hung (first failure, attempt 0)" "$log" || fail "$row" "no summary of the hung worker"
  grep -q " is late: " "$log" && fail "$row" "a deadlock was called late: $(grep -m1 ' is late: ' "$log")"
}

check() {
  local row=$1 log="$W/$1/job.log" port
  port=$(cat "$W/$row/port" 2> /dev/null)
  local service="127\.0\.0\.1:$port \(pid [0-9]+ \(python[0-9.]* outside_world\.py service port [0-9]+\)\)"
  case $row in
    save)
      healthy save 0 "it has not entered barrier #[0-9]+ of group 0 \(ranks 0-2\) for [0-9]+ s while ranks 1,2 wait; it is busy \([0-9.]+ CPU, (reading [^,]+, )?writing [0-9.]+ MB/s\) in save at default_jobs.py:[0-9]+"
      [ "$(grep -c "^meshrun: .* is late: " "$log")" = 1 ] || fail save "not exactly one late line (it is repeated every 5 minutes, not sooner)" ;;
    eval) healthy eval 0 "it has not entered all_reduce #[0-9]+ of group 0 \(ranks 0-2\) for [0-9]+ s while ranks 1,2 wait; it is busy \([0-9.]+ CPU[^)]*\) in evaluate at default_jobs.py:[0-9]+" ;;
    compile) healthy compile 1 "it has not entered all_reduce #1 of group 0 \(ranks 0-2\) for [0-9]+ s while ranks 0,2 wait; it is busy" ;;
    dataloader) healthy dataloader 0 "it has not entered all_reduce #[0-9]+ of group 0 \(ranks 0-2\) for [0-9]+ s while ranks 1,2 wait; it is busy \(3 processes: " ;;
    lock)
      hung lock 2 "never entered all_reduce #2 of group 0 \(ranks 0-2\); ranks 0,1 wait in it"
      grep -Eq "^meshrun:   rank 2 is idle for [0-9]+ s \(0\.0[0-4] CPU, no I/O, its Python stack unchanged\) in main at default_jobs.py:[0-9]+" "$log" ||
        fail lock "the verdict does not say rank 2 is idle, and where"
      grep -Eq "^meshrun:   rank 2 waits on a lock, an event or a queue that nothing else in its tree can release" "$log" ||
        fail lock "the verdict does not say what rank 2 waits on (the proof)"
      grep -A30 "meshrun: worker hung" "$log" | grep -q "stack (py-spy)" || fail lock "no py-spy stack in the summary"
      grep -A30 "meshrun: worker hung" "$log" | grep -q "main (.*default_jobs.py:" || fail lock "the stack does not show main()" ;;
    socket)
      hung socket 2 "never entered all_reduce #1 of group 0 \(ranks 0-2\); ranks 0,1 wait in it"
      grep -Eq "^meshrun:   rank 2 waits on a Unix socket to itself that only its own process can serve" "$log" ||
        fail socket "the verdict does not say rank 2 waits on its own socket" ;;
    http) outside http "waits on a reply from 127\.0\.0\.1:$port \(HTTP\) \(pid [0-9]+ \(python[0-9.]* outside_world\.py service port 90\)\), since [0-9:]+, in urlopen at default_jobs.py:[0-9]+" ;;
    poll) outside poll "sleeps \(a timed wait that ends by itself\), in wait_for_flag at default_jobs.py:[0-9]+" ;;
    retry) outside retry "sleeps \(a timed wait that ends by itself\), in retry_sleeps at default_jobs.py:[0-9]+" ;;
    child) outside child "waits on its child [0-9]+ \(.*\), which waits on a reply from $service, since [0-9:]+, in run at default_jobs.py:[0-9]+" ;;
    download) outside download "waits on its thread 'downloader' \([0-9]+\), which waits on a reply from 127\.0\.0\.1:$port \(HTTP\) \(pid [0-9]+ \(python[0-9.]* outside_world\.py service port [0-9]+\)\) in download at default_jobs.py:[0-9]+, since [0-9:]+, in wait at default_jobs.py:[0-9]+" ;;
    pipe) outside pipe "waits on a named pipe .*/pipe/feed fed by pid [0-9]+ \(python[0-9.]* outside_world\.py feed feed [0-9]+\), since [0-9:]+, in read_feed at default_jobs.py:[0-9]+" ;;
    event)
      deadlock event "rank 2 \(.*never entered all_reduce #2 of group 0 \(ranks 0-2\); ranks 0,1 wait in it"
      grep -Eq "^meshrun:   rank 2 waits on a lock, an event or a queue that nothing else in its tree can release" "$log" ||
        fail event "the verdict does not say why rank 2 is hung" ;;
    mismatch) deadlock mismatch "ranks disagree at #2 of group 0 \(ranks 0-2\): rank 1 called broadcast, ranks 0,2 all_reduce" ;;
    cycle) deadlock cycle "ranks wait for each other in different groups \(collectives called in another order\)" ;;
    spin)
      grep -Eq "^meshrun: rank 1 \([^)]*\) is late: it has not entered all_reduce #3 of group 0 \(ranks 0-2\) for [0-9]+ s while ranks 0,2 wait; it is busy \([0-9.]+ CPU" "$log" ||
        fail spin "rank 1 was not named late first"
      hung spin 1 "has kept ranks 0,2 waiting in all_reduce #3 of group 0 \(ranks 0-2\) for [0-9]+ s, past --hang-busy-timeout \(30 s\); it is busy" ;;
  esac
  echo "ROW $row: ended $(cat "$W/$row/rc"); $(grep -m1 "is late: \|^meshrun: hang: " "$log")"
}

for row in $ROWS; do start "$row"; done
[[ " $ROWS " == *" save "* ]] && watch_save
for row in $ROWS; do
  for _ in $(seq 3000); do [ -f "$W/$row/rc" ] && break; sleep 0.1; done
  [ -f "$W/$row/rc" ] || { fail "$row" "the job did not end within 300 s"; echo 124 > "$W/$row/rc"; }
  before=$FAILS
  check "$row"
  [ "$FAILS" = "$before" ] || { echo "--- $row: meshrun's output"; cat "$W/$row/job.log"; }
done
echo "$FAILS failure(s)"
[ "$FAILS" = 0 ]
