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
    lock) seconds=0 ;;
    compile | dataloader) seconds=25 flags+=(--hang-floor 10) ;;
    socket) seconds=0 flags+=(--hang-floor 10) ;;
    spin) seconds=0 flags+=(--hang-floor 10 --hang-busy-timeout 30) ;;
    *) echo "unknown row $row"; exit 2 ;;
  esac
  if [ "$row" = save ]; then
    start_daemon
    flags=(--rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" --rdzv-id defaults-save)
  fi
  mkdir -p "$W/$row/out"
  (
    PATH="$VENV_BIN:$PATH" "$MESHRUN" "${flags[@]}" --nproc-per-node 3 "$HERE/default_jobs.py" "$row" "$seconds" \
      "$W/$row/out" > "$W/$row/job.log" 2>&1
    echo $? > "$W/$row/rc"
  ) &
  pids+=($!)
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

check() {
  local row=$1 log="$W/$1/job.log"
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
      grep -A30 "meshrun: worker hung" "$log" | grep -q "stack (py-spy)" || fail lock "no py-spy stack in the summary"
      grep -A30 "meshrun: worker hung" "$log" | grep -q "main (.*default_jobs.py:" || fail lock "the stack does not show main()" ;;
    socket) hung socket 2 "never entered all_reduce #1 of group 0 \(ranks 0-2\); ranks 0,1 wait in it" ;;
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
