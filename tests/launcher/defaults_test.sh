#!/bin/bash
# Right by default (docs/progress.md, "Stuck or busy"): jobs as people run them, an unmodified 3-rank Gloo
# script (default_jobs.py), every hang flag at its default unless the row says otherwise. A healthy job must
# end 0 as under torchrun; a stuck rank must be named hung. One row per run:
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
# Timings are printed, never asserted (bench/hang/defaults.sh measures them against torchrun).
# Usage: defaults_test.sh ROW MESHRUN DAEMON VENV_BIN
ROW=$1 MESHRUN=$2 DAEMON=$3 VENV_BIN=$4
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2> /dev/null; done; wait 2> /dev/null; rm -rf "$W"; }
trap cleanup EXIT
OUT=$W/out; mkdir -p "$OUT"
FAILS=0
fail() { echo "FAIL ($ROW): $*"; FAILS=$((FAILS + 1)); }

FLAGS=(--standalone)
case $ROW in
  save) SECONDS_=100 ;;
  eval) SECONDS_=100 ;;
  lock) SECONDS_=0 ;;
  compile | dataloader) SECONDS_=25; FLAGS+=(--hang-floor 10) ;;
  socket) SECONDS_=0; FLAGS+=(--hang-floor 10) ;;
  spin) SECONDS_=0; FLAGS+=(--hang-floor 10 --hang-busy-timeout 30) ;;
  *) echo "unknown row $ROW"; exit 2 ;;
esac

# The save row runs against a meshrun-rendezvous of its own with its HTTP view: status and /metrics are read
# while rank 0 is late.
if [ "$ROW" = save ]; then
  "$DAEMON" --host 127.0.0.1 --port 0 --http-port 0 > "$W/daemon.out" 2> "$W/daemon.err" &
  pids+=($!)
  for _ in $(seq 100); do grep -q '^http on ' "$W/daemon.out" && break; sleep 0.1; done
  ENDPOINT=$(sed -n 's/^listening on //p' "$W/daemon.out")
  HTTP_PORT=$(sed -n 's/^http on .*:\([0-9]*\)$/\1/p' "$W/daemon.out")
  [ -n "$HTTP_PORT" ] || { echo "FAIL: the daemon did not start: $(cat "$W/daemon.out" "$W/daemon.err")"; exit 1; }
  FLAGS=(--rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" --rdzv-id defaults-save)
fi
http_get() {
  exec 3<> "/dev/tcp/127.0.0.1/$HTTP_PORT" || return 1
  printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' "$1" >&3
  cat <&3
  exec 3<&-
}

t0=$(date +%s.%N)
PATH="$VENV_BIN:$PATH" "$MESHRUN" "${FLAGS[@]}" --nproc-per-node 3 "$HERE/default_jobs.py" "$ROW" "$SECONDS_" "$OUT" \
  > "$W/job.log" 2>&1 &
JOB=$!
pids+=($JOB)

if [ "$ROW" = save ]; then
  # Rank 0 is late once the verdict came (the budget, 60 s, after the barrier began): status and /metrics say so.
  seen_status=0 seen_metric=0
  for _ in $(seq 1500); do
    kill -0 "$JOB" 2> /dev/null || break
    if [ $seen_status = 0 ] && "$DAEMON" status --endpoint "$ENDPOINT" --json 2> /dev/null |
      "$VENV_BIN/python" -c 'import json,sys
s = json.load(sys.stdin)
late = [r for run in s["runs"] for n in run["nodes"] for r in n["ranks"] if r.get("late")]
sys.exit(0 if [r["rank"] for r in late] == [0] and "is late" in late[0]["late_reason"] else 1)'; then
      seen_status=1
      "$DAEMON" status --endpoint "$ENDPOINT" | grep -q "LATE" || fail "status's table does not flag rank 0 LATE"
    fi
    if [ $seen_metric = 0 ] && http_get /metrics 2> /dev/null | grep -q '^meshrun_rank_late{.*rank="0".*} 1'; then
      seen_metric=1
    fi
    [ $seen_status = 1 ] && [ $seen_metric = 1 ] && break
    sleep 0.1
  done
  [ $seen_status = 1 ] || fail "the daemon's status never showed rank 0 late (and only rank 0)"
  [ $seen_metric = 1 ] || fail "/metrics never had meshrun_rank_late{rank=\"0\"} 1"
fi

wait "$JOB"
RC=$?
ELAPSED=$(echo "$(date +%s.%N) - $t0" | bc)
LOG=$W/job.log
late_lines=$(grep -c "^meshrun: .* is late: " "$LOG")
verdict=$(grep -m1 "^meshrun: hang: " "$LOG")
fault_s=""
[ -f "$OUT/fault" ] && fault_s=$(cat "$OUT/fault")

healthy() {  # healthy LATE_RANK TEXT: ends 0, every rank done, late lines name the rank and TEXT, no hang
  local rank=$1 text=$2
  [ "$RC" = 0 ] || fail "the job ended $RC, expected 0 (as under torchrun)"
  for r in 0 1 2; do [ -f "$OUT/done.$r" ] || fail "rank $r did not end cleanly"; done
  grep -q "hang:\|worker hung\|restarting" "$LOG" && fail "a hang or a restart: $(grep -m2 'hang:\|worker hung\|restarting' "$LOG")"
  [ "$late_lines" -ge 1 ] || fail "no late line"
  grep "^meshrun: .* is late: " "$LOG" | grep -v "^meshrun: rank $rank (" > /dev/null && fail "a late line names another rank"
  grep -Eq "^meshrun: rank $rank \([^)]*\) is late: $text" "$LOG" || fail "the late line does not read '$text'"
}
hung() {  # hung RANK TEXT: ends 1, the verdict names the rank and TEXT, the worker's summary and its stack
  local rank=$1 text=$2
  [ "$RC" = 1 ] || fail "the job ended $RC, expected 1 (hung, --max-restarts 0)"
  echo "$verdict" | grep -Eq "^meshrun: hang: rank $rank \(.*$text" || fail "the verdict is not 'rank $rank ... $text': $verdict"
  grep -q "meshrun: worker hung (first failure, attempt 0)" "$LOG" || fail "no summary of the hung worker"
  grep -A2 "meshrun: worker hung" "$LOG" | grep -q "rank:       $rank " || fail "the summary does not name rank $rank"
}

case $ROW in
  save)
    healthy 0 "it has not entered barrier #[0-9]+ of group 0 \(ranks 0-2\) for [0-9]+ s while ranks 1,2 wait; it is busy \([0-9.]+ CPU, (reading [^,]+, )?writing [0-9.]+ MB/s\) in save at default_jobs.py:[0-9]+"
    [ "$late_lines" = 1 ] || fail "$late_lines late lines, expected one (it is repeated every 5 minutes, not sooner)" ;;
  eval) healthy 0 "it has not entered all_reduce #[0-9]+ of group 0 \(ranks 0-2\) for [0-9]+ s while ranks 1,2 wait; it is busy \([0-9.]+ CPU[^)]*\) in evaluate at default_jobs.py:[0-9]+" ;;
  compile) healthy 1 "it has not entered all_reduce #1 of group 0 \(ranks 0-2\) for [0-9]+ s while ranks 0,2 wait; it is busy" ;;
  dataloader) healthy 0 "it has not entered all_reduce #[0-9]+ of group 0 \(ranks 0-2\) for [0-9]+ s while ranks 1,2 wait; it is busy \(3 processes: " ;;
  lock)
    hung 2 "never entered all_reduce #2 of group 0 \(ranks 0-2\); ranks 0,1 wait in it"
    grep -Eq "^meshrun:   rank 2 is idle for [0-9]+ s \(0\.0[0-4] CPU, no I/O, its Python stack unchanged\) in main at default_jobs.py:[0-9]+" "$LOG" ||
      fail "the verdict does not say rank 2 is idle, and where"
    grep -A30 "meshrun: worker hung" "$LOG" | grep -q "stack (py-spy)" || fail "no py-spy stack in the summary"
    grep -A30 "meshrun: worker hung" "$LOG" | grep -q "main (.*default_jobs.py:" || fail "the stack does not show main()" ;;
  socket) hung 2 "never entered all_reduce #1 of group 0 \(ranks 0-2\); ranks 0,1 wait in it" ;;
  spin)
    grep -Eq "^meshrun: rank 1 \([^)]*\) is late: it has not entered all_reduce #3 of group 0 \(ranks 0-2\) for [0-9]+ s while ranks 0,2 wait; it is busy \((1\.00|0\.[5-9][0-9]) CPU" "$LOG" ||
      fail "rank 1 was not named late first"
    hung 1 "has kept ranks 0,2 waiting in all_reduce #3 of group 0 \(ranks 0-2\) for [0-9]+ s, past --hang-busy-timeout \(30 s\); it is busy" ;;
esac
if [ -n "$fault_s" ]; then
  first=$(grep -m1 -n "is late: \|^meshrun: hang: " "$LOG" | cut -d: -f1)
  echo "TIMING $ROW: job ended $RC after ${ELAPSED%.*} s; fault began at $fault_s; first late/hang line at log line ${first:-none}"
fi
if [ "$FAILS" != 0 ]; then
  echo "--- meshrun's output"
  cat "$LOG"
fi
echo "$FAILS failure(s)"
[ "$FAILS" = 0 ]
