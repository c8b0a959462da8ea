#!/bin/bash
# Standby workers (docs/multi-node.md#standby-workers): a worker killed mid-run restarts from a standby (the agent's
# line says so), and what the script sees there is what a fresh interpreter shows (standby_view_job.py).
#   fresh:    --no-standby: attempt 0 and attempt 1 both fresh interpreters
#   standby:  attempt 0 fresh, killed (SIGKILL) once its standby's process is up; attempt 1 from the standby, which
#             is still importing (--preload standby_slow_import: longer than the keep-alive timeout)
#   interpreter: as standby, with `python standby_view_job.py` as the entrypoint (no -u: the standby must not add it)
# Within each run, attempt 1's view is diffed against attempt 0's: the standby run must differ in exactly what the
# fresh run differs in (the restart count, the attempt's paths: what any restart changes), and nowhere else. Then
# the standby's exits: sys.exit(7) -> 7, os._exit(9) -> 9 (no atexit), an exception -> 1 with the same traceback
# as a fresh interpreter's (atexit run).
# Usage: standby_test.sh MESHRUN VENV_BIN
MESHRUN=$1 VENV_BIN=$2
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fails=0
fail() { echo "FAILED ($1): ${*:2}"; fails=$((fails + 1)); }

# The jobs run one after the other: a standby still importing is taken for at most 20 s, and six jobs importing torch
# at once beside the suite's other tests take longer than that. Standbys start at once (--standby-start now), not
# into idle cores: on a loaded machine (the suite runs tests side by side) no core may sit idle, and the held
# attempt 0 would wait for its standby forever.
job() {  # job NAME END STANDBY(yes|no) [MESHRUN FLAGS...]: output in $W/NAME/job.log, exit code in $W/NAME/rc
  local name=$1 end=$2 standby=$3 flags=() hold=()
  shift 3
  mkdir -p "$W/$name"
  if [ "$standby" = yes ]; then hold=(--hold) flags=(--standby-start now); else flags=(--no-standby); fi
  (cd "$W/$name" && PATH="$VENV_BIN:$PATH" PYTHONPATH="$HERE" "$MESHRUN" --standalone --nproc-per-node 1 \
    --max-restarts 1 "${flags[@]}" "$@" ${INTERPRETER:-} "$HERE/standby_view_job.py" "$W/$name" --end "$end" "${hold[@]}" \
    > "$W/$name/job.log" 2>&1)
  echo $? > "$W/$name/rc"
}

job fresh ok no
# The standby also imports a module slower than the keep-alive timeout, and attempt 0 ends as soon as the standby's
# process is up: the restart waits for it, beating meanwhile.
job standby ok yes --preload standby_slow_import
# An entrypoint that is the interpreter itself, without -u: `meshrun ... python job.py` is a Python script run too.
INTERPRETER=python job interpreter ok yes
# The standby's exits, against what a fresh interpreter does (checked below).
job sys_exit sys_exit_7 yes
job os_exit os_exit_9 yes
job raised raise yes
job raised_fresh raise no
for name in fresh standby interpreter; do
  [ "$(cat "$W/$name/rc")" = 0 ] || { fail $name "the job ended $(cat "$W/$name/rc")"; cat "$W/$name/job.log"; }
done
for name in standby interpreter; do
  grep -q "round 1: local rank 0 started from standby workers" "$W/$name/job.log" ||
    { fail $name "attempt 1 did not start from a standby"; cat "$W/$name/job.log"; }
done
! grep -q "started from standby workers" "$W/fresh/job.log" || fail fresh "--no-standby still started from a standby"

"$VENV_BIN/python" - "$W/fresh" "$W/standby" "$W/interpreter" << 'PY' || fails=$((fails + 1))
import json, sys


def load(folder, attempt):
    return json.load(open(f"{folder}/view_{attempt}.json"))


def differences(a, b):
    """The fields (environment variables one by one) in which two views differ."""
    out = set()
    for key in sorted(set(a) | set(b)):
        if key == "environ":
            for var in sorted(set(a[key]) | set(b[key])):
                if a[key].get(var) != b[key].get(var):
                    out.add("environ." + var)
        elif a.get(key) != b.get(key):
            out.add(key)
    return out


fresh_dir = sys.argv[1]
fresh = differences(load(fresh_dir, 0), load(fresh_dir, 1))
problems = []
if not fresh:
    problems.append("a restart changed nothing in the fresh run: the comparison would prove nothing")
for standby_dir in sys.argv[2:]:
    run = standby_dir.rsplit("/", 1)[1]
    a, b = load(standby_dir, 0), load(standby_dir, 1)
    standby = differences(a, b)
    for field in sorted(standby - fresh):
        if field.startswith("environ."):
            var = field[8:]
            seen = (a["environ"].get(var), b["environ"].get(var))
        else:
            seen = (a.get(field), b.get(field))
        problems.append(f"{run}: under the standby, {field} differs from a fresh interpreter's: "
                        f"fresh {seen[0]!r}, standby {seen[1]!r}")
    for field in sorted(fresh - standby):
        problems.append(f"{run}: a restart changes {field} in a fresh interpreter, but not under the standby")
print(f"a restart changes {len(fresh)} fields in a fresh interpreter: {', '.join(sorted(fresh))}")
for p in problems:
    print("FAILED (view):", p)
sys.exit(1 if problems else 0)
PY

# The standby's exits, against what a fresh interpreter does.
expect_exit() {  # expect_exit NAME END RC ATEXIT(yes|no): the job ran above
  local name=$1 rc
  rc=$(cat "$W/$name/rc")
  grep -q "round 1: local rank 0 started from standby workers" "$W/$name/job.log" ||
    fail "$name" "attempt 1 did not start from a standby"
  [ "$rc" = "$3" ] || { fail "$name" "meshrun exited $rc, a fresh interpreter's $2 exits $3"; cat "$W/$name/job.log"; }
  if [ "$4" = yes ]; then [ -e "$W/$name/atexit_1" ] || fail "$name" "atexit did not run"; fi
  if [ "$4" = no ]; then [ ! -e "$W/$name/atexit_1" ] || fail "$name" "atexit ran after os._exit"; fi
}
expect_exit sys_exit sys_exit_7 7 yes
expect_exit os_exit os_exit_9 9 no
expect_exit raised raise 1 yes
# The traceback a fresh interpreter prints, frame for frame: rank prefixes (meshrun's, and torch's own once a
# process group exists) and the attempt lines aside.
traceback() { grep '^\[rank0\]:' "$1" | sed -E 's/^(\[rank0\]: ?)+//' | sed -n '/^Traceback/,/^RuntimeError/p'; }
traceback "$W/raised_fresh/job.log" > "$W/fresh.tb"
traceback "$W/raised/job.log" > "$W/standby.tb"
grep -q "standby_view_job.py\", line [0-9]*, in fail_here" "$W/fresh.tb" ||
  { fail traceback "the fresh run printed no traceback to compare with"; cat "$W/raised_fresh/job.log"; }
diff "$W/fresh.tb" "$W/standby.tb" > "$W/tb.diff" || { fail traceback "the standby's traceback differs:"; cat "$W/tb.diff"; }

[ "$fails" = 0 ] && echo "PASS: the restart ran in a standby; its view, exits and traceback are a fresh interpreter's"
exit $((fails > 0))
