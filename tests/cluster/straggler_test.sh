#!/bin/bash
# Stragglers named from when each rank entered its collectives, with no code in the script: two nodes
# (network namespaces), one PyTorch Gloo rank each, running tests/cluster/straggler_job.py (no beats, no
# compute_s), the agent of node0 hosting the rendezvous, the default --straggler-threshold. The namespaces
# share one clock, so a node's clock is put off with Debian's faketime (libfaketime preloaded):
#   skewed   node1's agent and worker run 7 s ahead; rank 0 (node0) computes 1.5x as long as rank 1.
#            Both agents name rank 0 as the straggler and never rank 1 (uncorrected, node1's 7 s would make
#            rank 1 look late at every collective), and status shows node1's clock +7 s from the daemon's.
#   healthy  node1's worker alone runs 5 s behind (its agent does not: the worker's offset from its agent
#            is measured too); equal compute over 300 steps: no straggler line on either node.
#   healthy_both   HEALTHY_S seconds (default 300; the suite runs 90, bench/faults/straggler_healthy_both.sh
#            300 and more) healthy on both routes at once, on the defaults: two jobs side by side, one
#            with beats and one without, each with equal work per step (a fixed amount, not a clock) on its two
#            ranks, so that each job's cores are shared with the other's busy processes (4 busy ranks, 2 cores):
#            no straggler line on any of the four agents, and every rank has its route's figure. Each job also
#            has a hot spare and --replace-slow-nodes (which changes nothing of the naming): nothing is evicted. On 2 cores
#            a healthy rank's arrival figure can lead by 20-35 % for a probe or two (wake-up latency on busy
#            cores): only a rank the last probes found slow is named (docs/progress.md).
#   healthy_jitter   one healthy job for HEALTHY_S seconds (default 300) on the route HEALTHY_ROUTE (beats or
#            arrivals), equal work per step on its two ranks, the cores shared with another busy process (a
#            spinning Python, not part of the job): no straggler line on either agent, and both ranks have their
#            route's figure (bench/faults/straggler_healthy.sh runs it for 30 minutes).
#   throttled / throttled_beats   equal work on both ranks (a fixed amount per step, not a clock), then
#            rank 0's worker is put in a CPU cgroup limited to half a core while it runs: both agents name
#            rank 0, never rank 1, from arrival times (no beats) or from the beats' compute_s; the seconds
#            from the limit to the first straggler line are printed (docs/benchmarks.md has the figures).
# Usage: straggler_test.sh SCENARIO MESHRUN VENV_BIN   (root; exits 77 when namespaces cannot be made)
SCENARIO=$1 MESHRUN=$2 VENV_BIN=$3
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/cluster.sh"
FAKETIME_LIB=/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1
[ -f "$FAKETIME_LIB" ] || { echo "FAILED: $FAKETIME_LIB is missing: install faketime (scripts/setup.sh does)"; exit 1; }
mc_init 2
W=$MC_DIR/work; mkdir -p "$W"; cd "$W" || exit 1
RUN=strag$SCENARIO; D=$W/out; mkdir -p "$D"
PORT=29641
RDZV_BIN=$(dirname "$MESHRUN")/meshrun-rendezvous
# Wall clock only: Gloo's and meshrun's deadlines use the monotonic clock, which stays true.
skew() { echo env LD_PRELOAD="$FAKETIME_LIB" FAKETIME="$1" FAKETIME_DONT_FAKE_MONOTONIC=1; }
declare -a A

# agent I PREFIX... -- ARGS: meshrun on node I (PREFIX: a command meshrun itself runs under, or nothing).
agent() {
  local i=$1; shift
  local prefix=()
  while [ "$1" != "--" ]; do prefix+=("$1"); shift; done; shift
  mc_spawn "$i" "$W/node$i${LOG_SUFFIX:-}.log" env MC_JOB=$RUN PATH="$VENV_BIN:$PATH" "${prefix[@]}" "$MESHRUN" \
    --rdzv-backend c10d --rdzv-endpoint "node0:$PORT" --rdzv-id "$RUN" --nnodes 2 --nproc-per-node 1 \
    --max-restarts 0 "$@"
  A[$i]=$MC_PID
}
expect_exit() {   # expect_exit NODE RC SECS
  mc_wait_exit "${A[$1]}" "$3"
  [ "$MC_RC" = "$2" ] || mc_fail "$SCENARIO: node$1's meshrun exited $MC_RC, expected $2"
}
show_logs() { local i; for i in 0 1; do [ -f "$W/node$i.log" ] && { echo "--- node$i"; cat "$W/node$i.log"; }; done; }
status_json() { mc_on 0 "$RDZV_BIN" status --endpoint "node0:$PORT" --json 2> /dev/null; }
both_ranks_have() {   # both_ranks_have FIELD PORT: both ranks of the daemon on node0:PORT show FIELD > 0 (printed)
  mc_on 0 "$RDZV_BIN" status --endpoint "node0:$2" --json > "$W/status.json" 2> /dev/null
  "$VENV_BIN/python" - "$W/status.json" "$1" << 'PY'
import json, sys
ranks = [r for run in json.load(open(sys.argv[1]))["runs"] for n in run["nodes"] for r in n.get("ranks", [])]
figures = {r["rank"]: r.get(sys.argv[2], 0) for r in ranks}
print(sys.argv[2], {k: round(v * 1e3, 1) for k, v in figures.items()}, "ms")
sys.exit(0 if len(figures) == 2 and min(figures.values()) > 0 else 1)
PY
}

case $SCENARIO in
  skewed)
    JOB=("$HERE/straggler_job.py" "$D" 100000 40 0 1.5)
    agent 0 -- "${JOB[@]}"
    agent 1 $(skew +7s) -- "${JOB[@]}"
    named=""
    for _ in $(seq 900); do   # <= 90 s
      [ "$(cat "$W/node0.log" "$W/node1.log" | grep -c "^meshrun: straggler: rank 0 on node0")" -ge 2 ] && { named=1; break; }
      sleep 0.1
    done
    [ -n "$named" ] || mc_fail "$SCENARIO: rank 0 was not named a straggler on both nodes within 90 s"
    status_json > "$W/status.json"
    "$VENV_BIN/python" - "$W/status.json" << 'PY' || mc_fail "$SCENARIO: status does not show node1's clock 7 s ahead"
import json, sys
nodes = {n["host"]: n for r in json.load(open(sys.argv[1]))["runs"] for n in r["nodes"]}
clock = {h: n.get("clock", {}) for h, n in nodes.items()}
print("CLOCKS", {h: round(c.get("offset_s", 0), 4) for h, c in clock.items()})
ok = clock["node1"].get("measured") and abs(clock["node1"]["offset_s"] - 7) < 0.5 and abs(clock["node0"]["offset_s"]) < 0.5
ranks = [r for n in nodes.values() for r in n.get("ranks", [])]
print("ARRIVAL_COMPUTE_MS", {r["rank"]: round(r.get("arrival_compute_s", 0) * 1e3, 1) for r in ranks})
sys.exit(0 if ok else 1)
PY
    grep -h "straggler" "$W"/node?.log | sed "s/^/SEEN: /" | head -4
    grep -q "^meshrun: straggler: rank 1" "$W"/node?.log && mc_fail "$SCENARIO: rank 1 was named a straggler"
    for i in 0 1; do
      grep -q "^meshrun: straggler: rank 0 on node0 computes .* between collectives" "$W/node$i.log" ||
        mc_fail "$SCENARIO: node$i did not print rank 0 as the straggler"
    done
    kill -TERM "${A[0]}" "${A[1]}" 2> /dev/null
    mc_wait_exit "${A[0]}" 60; mc_wait_exit "${A[1]}" 60 ;;
  healthy)
    JOB=("$HERE/straggler_job.py" "$D" 300 40)
    agent 0 -- "${JOB[@]}"
    agent 1 -- --no-python $(skew -5s) "$VENV_BIN/python" "${JOB[@]}"
    # While it runs, both ranks get a figure from their arrival times (the measure is on, not idle).
    measured=""
    for _ in $(seq 120); do
      status_json > "$W/status.json"
      "$VENV_BIN/python" - "$W/status.json" << 'PY' && { measured=1; break; }
import json, sys
ranks = [r for run in json.load(open(sys.argv[1]))["runs"] for n in run["nodes"] for r in n.get("ranks", [])]
figures = {r["rank"]: r.get("arrival_compute_s", 0) for r in ranks}
print("ARRIVAL_COMPUTE_MS", {k: round(v * 1e3, 1) for k, v in figures.items()})
sys.exit(0 if len(figures) == 2 and min(figures.values()) > 0 else 1)
PY
      sleep 0.5
    done > "$W/measured.txt"
    tail -1 "$W/measured.txt"
    [ -n "$measured" ] || mc_fail "$SCENARIO: the ranks never got a figure from their arrival times"
    expect_exit 0 0 180; expect_exit 1 0 60
    [ "$(mc_count_files "$D" '^done\.')" = 2 ] || mc_fail "$SCENARIO: $(mc_count_files "$D" '^done\.') of 2 ranks ended cleanly"
    grep -q "straggler" "$W"/node?.log && mc_fail "$SCENARIO: a straggler was named: $(grep -h straggler "$W"/node?.log | head -3)" ;;
  healthy_both)
    seconds=${HEALTHY_S:-300}
    mkdir -p "$D/nobeats" "$D/beats"
    # Each job also has a hot spare (a third agent on node1) and --replace-slow-nodes: nothing is evicted.
    spares=()
    job_with_spare() {   # job_with_spare ARGS...: the two seats, then the spare
      agent 0 -- --replace-slow-nodes "$@"
      agent 1 -- --replace-slow-nodes "$@"
      local seat=${A[1]}
      sleep 1
      LOG_SUFFIX=${LOG_SUFFIX:-}_spare agent 1 -- --replace-slow-nodes "$@"
      spares+=("$MC_PID"); A[1]=$seat
    }
    RUN=strag_nobeats
    job_with_spare "$HERE/straggler_job.py" "$D/nobeats" 1000000 40 --work --for="$seconds"
    RUN=strag_beats PORT=$((PORT + 2)) LOG_SUFFIX=_beats
    A2=("${A[@]}")
    job_with_spare "$HERE/straggler_job.py" "$D/beats" 1000000 40 --work --beats --for="$seconds"
    # Both jobs get their route's figure on both ranks (the measure is on, not idle), read every fifth of the run
    # (once a minute on 5 minutes), the last well before its end.
    for _ in 1 2 3 4; do
      sleep $((seconds / 5))
      for port in $((PORT - 2)):arrival_compute_s $PORT:compute_s; do
        both_ranks_have "${port#*:}" "${port%%:*}" || mc_fail "$SCENARIO: no ${port#*:} for both ranks"
      done
    done
    for pid in "${A2[@]}" "${A[@]}" "${spares[@]}"; do
      mc_wait_exit "$pid" 180; [ "$MC_RC" = 0 ] || mc_fail "$SCENARIO: an agent exited $MC_RC"
    done
    [ "$(grep -l "hot spare: the round has its 2 nodes" "$W"/node*.log | wc -l)" = 2 ] ||
      mc_fail "$SCENARIO: not one hot spare per job"
    grep -h "evicted\|slow node" "$W"/node*.log && mc_fail "$SCENARIO: a slow node was acted on in a healthy job"
    for job in nobeats beats; do
      [ "$(mc_count_files "$D/$job" '^done\.')" = 2 ] || mc_fail "$SCENARIO: $job: not every rank ended cleanly"
    done
    grep -h "straggler" "$W"/node*.log && mc_fail "$SCENARIO: a straggler was named on a healthy job" ;;
  healthy_jitter)
    seconds=${HEALTHY_S:-300} route=${HEALTHY_ROUTE:-beats}
    JOB=("$HERE/straggler_job.py" "$D" 1000000 40 --work --for="$seconds")
    field=arrival_compute_s
    [ "$route" = beats ] && JOB+=(--beats) field=compute_s
    mc_spawn 0 "$W/spinner.log" "$VENV_BIN/python" -c "while True: pass"   # in a node: the cleanup ends it
    SPINNER=$MC_PID
    agent 0 -- "${JOB[@]}"
    agent 1 -- "${JOB[@]}"
    for _ in $(seq $((seconds / 60))); do   # both ranks have their route's figure, read once a minute
      sleep 60
      both_ranks_have "$field" "$PORT" || mc_fail "$SCENARIO: no $field for both ranks"
    done
    expect_exit 0 0 180; expect_exit 1 0 60
    kill "$SPINNER"
    [ "$(mc_count_files "$D" '^done\.')" = 2 ] || mc_fail "$SCENARIO: not every rank ended cleanly"
    if grep -h "straggler" "$W"/node?.log; then
      mc_fail "$SCENARIO: a straggler was named on a healthy job ($route, $seconds s)"
    else
      echo "HEALTHY $route: no straggler line in $seconds s"
    fi ;;
  throttled | throttled_beats)
    JOB=("$HERE/straggler_job.py" "$D" 100000 40 --work)
    field=arrival_compute_s
    [ "$SCENARIO" = throttled_beats ] && JOB+=(--beats) field=compute_s
    agent 0 -- --rdzv-conf http_port=$((PORT + 1)) "${JOB[@]}"
    agent 1 -- "${JOB[@]}"
    measured=""
    for _ in $(seq 120); do  # both ranks have a figure of the route under test
      status_json > "$W/status.json"
      FIELD=$field "$VENV_BIN/python" - "$W/status.json" 2> /dev/null << 'PY' && { measured=1; break; }
import json, os, sys
ranks = [r for run in json.load(open(sys.argv[1]))["runs"] for n in run["nodes"] for r in n.get("ranks", [])]
figures = {r["rank"]: r.get(os.environ["FIELD"], 0) for r in ranks}
sys.exit(0 if len(figures) == 2 and min(figures.values()) > 0 else 1)
PY
      sleep 0.5
    done
    [ -n "$measured" ] || mc_fail "$SCENARIO: the ranks never got a $field figure"
    worker=$(mc_worker_pid 0 "python.*straggler_job.py") || mc_fail "$SCENARIO: no worker found on node0"
    grep -q "straggler" "$W"/node?.log && mc_fail "$SCENARIO: a straggler was named before any limit: $(grep -h straggler "$W"/node?.log | head -2)"
    # Half a core for rank 0's worker.
    mc_cpu_limit "$worker" 50 || mc_fail "$SCENARIO: cannot put rank 0's worker ($worker) in a CPU cgroup"
    limited=$(date +%s.%N)
    named="" line="computes [0-9.]* ms between collectives"
    [ "$SCENARIO" = throttled_beats ] && line="computes [0-9.]* s per step"
    for _ in $(seq 600); do   # <= 60 s
      grep -q "^meshrun: straggler: rank 0 on node0 $line" "$W/node0.log" "$W/node1.log" && { named=$(date +%s.%N); break; }
      sleep 0.1
    done
    [ -n "$named" ] && echo "THROTTLED $SCENARIO: rank 0 named $(awk -v a="$limited" -v b="$named" 'BEGIN { printf "%.1f", b - a }') s after its limit"
    [ -n "$named" ] || mc_fail "$SCENARIO: rank 0 was not named a straggler within 60 s of its CPU limit"
    grep -h "straggler" "$W"/node?.log | sed "s/^/SEEN: /" | head -4
    grep -q "^meshrun: straggler: rank 1" "$W"/node?.log && mc_fail "$SCENARIO: rank 1 was named a straggler"
    # The hosted daemon's /metrics: the straggler flag on rank 0 alone, the arrival figures (without beats),
    # and the hangs family (none here: its TYPE line, no sample).
    mc_on 0 "$VENV_BIN/python" -c "import urllib.request, sys; sys.stdout.write(urllib.request.urlopen('http://node0:$((PORT + 1))/metrics', timeout=10).read().decode())" > "$W/metrics.txt" ||
      mc_fail "$SCENARIO: no /metrics from the hosted daemon"
    "$VENV_BIN/python" - "$W/metrics.txt" "$SCENARIO" << 'PY' || mc_fail "$SCENARIO: /metrics does not show the straggler: $(grep -E 'straggler|arrival|hangs' "$W/metrics.txt")"
import re, sys
text, scenario = open(sys.argv[1]).read(), sys.argv[2]
def value(family, rank):
    m = re.search(family + r'\{[^}]*rank="' + str(rank) + r'"\} ([0-9.e+-]+)', text)
    return float(m.group(1)) if m else None
problems = []
if value("meshrun_rank_straggler", 0) != 1 or value("meshrun_rank_straggler", 1) != 0:
    problems.append("meshrun_rank_straggler is not 1 for rank 0 and 0 for rank 1")
arrival = [value("meshrun_rank_arrival_compute_seconds", r) for r in (0, 1)]
if scenario == "throttled" and not (arrival[0] and arrival[1] and arrival[0] > 1.3 * arrival[1]):
    problems.append(f"meshrun_rank_arrival_compute_seconds {arrival}: rank 0's not above 1.3x rank 1's")
if "# TYPE meshrun_hangs_total counter" not in text:
    problems.append("no meshrun_hangs_total family")
probes = {o: float(m.group(1)) for o in ("counted", "imprecise", "partial", "abandoned")
          for m in [re.search(r'meshrun_arrival_probes_total\{[^}]*outcome="' + o + r'"\} ([0-9.e+-]+)', text)] if m}
if len(probes) != 4 or (scenario == "throttled" and probes["counted"] < 2):
    problems.append(f"meshrun_arrival_probes_total {probes}: every outcome, and the probes that named rank 0 counted")
print("METRICS", {"straggler": [value("meshrun_rank_straggler", r) for r in (0, 1)], "arrival_compute_s": arrival,
                  "arrival_probes": probes})
for p in problems:
    print("FAILED:", p)
sys.exit(1 if problems else 0)
PY
    kill -TERM "${A[0]}" "${A[1]}" 2> /dev/null
    mc_wait_exit "${A[0]}" 60; mc_wait_exit "${A[1]}" 60 ;;
  *) echo "unknown scenario $SCENARIO"; exit 2 ;;
esac
mc_expect_gone "MC_JOB=$RUN" 20 && echo "$SCENARIO: no process of the job left on any node"
[ "$MC_FAILS" = 0 ] || show_logs
echo "$MC_FAILS failure(s)"
[ "$MC_FAILS" = 0 ]
