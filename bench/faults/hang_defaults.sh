#!/bin/bash
# Right by default, side by side with torchrun (docs/progress.md, "Stuck or busy"): the jobs of
# tests/launcher/default_jobs.py (an unmodified 3-rank Gloo script) on one machine, every flag at its default,
# under meshrun and under torchrun, TRIALS trials each. Not part of ctest.
#
# For each row and launcher: the exit code, the wall time, and for meshrun the seconds from the fault (the rank's
# own mark, OUT/fault) to the first "late" line and to the hang verdict. A stuck row under torchrun waits for
# PyTorch's own timeout (30 minutes for Gloo): the bench stops it after CAP seconds and says so.
#   bench/faults/hang_defaults.sh            (env TRIALS=3 CAP=180 ROWS="save eval ..." LAUNCHERS="meshrun torchrun")
# Rows: save 100 s, eval 100 s, compile 90 s, dataloader 70 s (healthy: must end 0); http, poll, retry, child,
# download, pipe 90 s each (rank 0 waits on the world outside the job: outside_world.py; must end 0); lock, socket,
# event, mismatch, cycle (deadlocks: must be named hung); spin (busy forever: late, never ended by default);
# spin_bounded (spin with --hang-busy-timeout 120). ROWS=... runs some.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MESHRUN=${MESHRUN:-$ROOT/build/bin/meshrun}
VENV_BIN=$ROOT/.venv/bin
JOB=$ROOT/tests/launcher/default_jobs.py
TRIALS=${TRIALS:-3} CAP=${CAP:-180}
ROWS=${ROWS:-save eval compile dataloader http poll retry child download pipe lock socket event mismatch cycle spin spin_bounded}
LAUNCHERS=${LAUNCHERS:-meshrun torchrun}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

seconds_of() {
  case $1 in
    save | eval) echo 100 ;;
    compile | http | poll | retry | child | download | pipe) echo 90 ;;
    dataloader) echo 70 ;;
    *) echo 0 ;;
  esac
}
row_of() { [ "$1" = spin_bounded ] && echo spin || echo "$1"; }

# start_outside ROW OUT: what the row's rank 0 waits on outside the job (tests/launcher/outside_world.py), its pid in
# OUTSIDE_PID; SERVICE_PORT and FEED for the job.
start_outside() {
  local row=$1 out=$2 world=("$VENV_BIN/python" "$ROOT/tests/launcher/outside_world.py") seconds
  seconds=$(seconds_of "$row")
  OUTSIDE_PID="" SERVICE_PORT="" FEED="$out/feed"
  case $row in
    http | child | download)
      "${world[@]}" service "$out/port" "$seconds" &
      OUTSIDE_PID=$!
      for _ in $(seq 100); do [ -s "$out/port" ] && break; sleep 0.1; done
      SERVICE_PORT=$(cat "$out/port") ;;
    poll) "${world[@]}" flag "$out/out" "$seconds" & OUTSIDE_PID=$! ;;
    pipe) mkfifo "$FEED"; "${world[@]}" feed "$FEED" "$seconds" & OUTSIDE_PID=$! ;;
  esac
}

# run_job LAUNCHER ROW TRIAL: one job, every output line stamped with the wall clock; prints its summary row.
run_job() {
  local launcher=$1 row=$2 n=$3 out="$W/$1-$2-$3"
  mkdir -p "$out/out"
  start_outside "$row" "$out"
  local cmd
  if [ "$launcher" = meshrun ]; then
    cmd=("$MESHRUN" --standalone --nproc-per-node 3)
    [ "$row" = spin_bounded ] && cmd+=(--hang-busy-timeout 120)
  else
    cmd=("$VENV_BIN/torchrun" --standalone --nproc-per-node 3)
  fi
  local t0 t1 rc
  t0=$(date +%s.%N)
  # At the cap, the launcher and every worker of the job: torchrun killed alone leaves its workers running,
  # holding the log's pipe open.
  local args=("$JOB" "$(row_of "$row")" "$(seconds_of "$row")" "$out/out")
  (sleep "$CAP"; pkill -KILL -f "${args[*]}") &
  local cap_pid=$!
  set -o pipefail
  PATH="$VENV_BIN:$PATH" SERVICE_PORT="$SERVICE_PORT" FEED="$FEED" "${cmd[@]}" "${args[@]}" 2>&1 |
    while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done > "$out/log"
  rc=$?
  set +o pipefail
  t1=$(date +%s.%N)
  kill "$cap_pid" 2> /dev/null
  pkill -KILL -f "${args[*]}" 2> /dev/null  # whatever is left
  [ -n "$OUTSIDE_PID" ] && kill "$OUTSIDE_PID" 2> /dev/null
  local fault late hang outcome
  fault=$(cat "$out/out/fault" 2> /dev/null)
  late=$(grep -m1 " meshrun: .* is late: " "$out/log" | cut -d' ' -f1)
  hang=$(grep -m1 " meshrun: hang: " "$out/log" | cut -d' ' -f1)
  since() { [ -n "$1" ] && [ -n "$fault" ] && awk -v a="$fault" -v b="$1" 'BEGIN { printf "%.1f", b - a }' || echo "-"; }
  case $rc in
    137) outcome="still running at the cap (${CAP} s): killed by the bench" ;;
    0) outcome="ended 0" ;;
    *) outcome="ended $rc" ;;
  esac
  printf '%-13s %-9s %d  %-52s wall %6.1f s  late at +%5s s  hung at +%5s s\n' "$row" "$launcher" "$n" "$outcome" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$(since "$late")" "$(since "$hang")"
  # What meshrun said the rank does or waits on: the last late line's end, or the verdict.
  local said
  said=$(grep " meshrun: .* is late: \| meshrun: hang: " "$out/log" | tail -1 | sed 's/^[0-9.]* meshrun: //')
  [ -n "$said" ] && printf '    %s\n' "${said: -160}"
  return 0
}

echo "# bench/faults/hang_defaults.sh $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, TRIALS=$TRIALS CAP=$CAP"
echo "# row           launcher  n  outcome                                              wall          late (after the fault)   hung"
# PARALLEL=1: a row's trials run side by side (its jobs mostly wait: the figures barely move, the bench takes a
# third of the time); each prints when all have ended.
for row in $ROWS; do
  for launcher in $LAUNCHERS; do
    [ "$launcher" = torchrun ] && [ "$row" = spin_bounded ] && continue  # torchrun has no such bound
    for n in $(seq "$TRIALS"); do
      if [ "${PARALLEL:-0}" = 1 ]; then
        run_job "$launcher" "$row" "$n" > "$W/summary-$launcher-$row-$n" &
      else
        run_job "$launcher" "$row" "$n"
      fi
    done
    wait
    [ "${PARALLEL:-0}" = 1 ] && cat "$W"/summary-"$launcher-$row"-*
  done
done
