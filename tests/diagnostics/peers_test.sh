#!/bin/bash
# `meshrun check --bandwidth --peers N` end to end on 127.0.0.1 (no root needed): three instances
# against a real daemon measure all three pairs and exactly one (#0) prints the matrix; --json data of
# bandwidth.peers / bandwidth.pairs is exactly what docs/troubleshooting.md documents; two instances of --peers 3
# name the one that never came after a bounded wait; usage errors.
# Usage: peers_test.sh MESHRUN DAEMON PYTHON DOC
set -u
MESHRUN=$1 DAEMON=$2 PY=$3 DOC=$4
T=$(mktemp -d /tmp/meshrun-peers-XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT
FAILS=0
fail() { echo "FAILED: $*"; FAILS=$((FAILS + 1)); }
has() { grep -qF -- "$2" "$1" || fail "$(basename "$1"): output lacks '$2'"; }

"$DAEMON" --host 127.0.0.1 --port 0 --log-level warn > "$T/daemon.log" 2>&1 & PIDS+=($!)
for _ in $(seq 300); do grep -q '^listening on' "$T/daemon.log" && break; sleep 0.1; done
PORT=$(head -1 "$T/daemon.log" | sed 's/.*://')
[ -n "$PORT" ] || { echo "FAILED: daemon did not start"; cat "$T/daemon.log"; exit 1; }
EP=127.0.0.1:$PORT

# instances NAME COUNT ARGS...: COUNT instances at once (60 s safety net each); outputs NAME.<k>.out,
# exit statuses NAME.<k>.rc.
instances() {
  local name=$1 count=$2 k pids=(); shift 2
  for k in $(seq 0 $((count - 1))); do
    ( timeout 60 "$MESHRUN" check --rdzv-endpoint "$EP" "$@" > "$T/$name.$k.out" 2>&1; echo $? > "$T/$name.$k.rc" ) &
    pids+=($!)
  done
  wait "${pids[@]}"
  for k in $(seq 0 $((count - 1))); do echo "== $name.$k (rc=$(cat "$T/$name.$k.rc"))"; cat "$T/$name.$k.out"; done
}

# --- three instances: every pair, one matrix ------------------------------------------------------
instances text 3 --rdzv-id text --peers 3 --peer-mib 16
PRINTERS=$(grep -l "GB/s row->col" "$T"/text.*.out | wc -l)
[ "$PRINTERS" = 1 ] || fail "expected exactly one instance to print the matrix, got $PRINTERS"
for k in 0 1 2; do
  f=$T/text.$k.out
  [ "$(cat "$T/text.$k.rc")" = 0 ] || fail "text.$k: exit status $(cat "$T/text.$k.rc")"
  has "$f" "PASS bandwidth.peers: 3 of 3 instances in session 'text'"
  grep -q "^FAIL " "$f" && fail "text.$k: a check failed"
done
M=$(grep -l "GB/s row->col" "$T"/text.*.out | head -1)
if [ -n "$M" ]; then
  has "$M" "PASS bandwidth.pairs: 3 of 3 pair(s) measured in 3 round(s)"
  for i in 0 1 2; do
    # One row per node in each table: its own cell "-", the two others numbers.
    rows=$(grep -E "^    #$i [^ ]+ " "$M" | awk '{ d = 0; n = 0; for (f = 3; f <= NF; f++) { if ($f == "-") d++; else if ($f ~ /^[0-9]+\.[0-9]+$/) n++ }
                                                  if (NF == 5 && d == 1 && n == 2) print }' | wc -l)
    [ "$rows" = 2 ] || fail "matrix rows of #$i are incomplete (found $rows complete rows, expected 2)"
  done
fi

# --- --json: the documented data fields, in both directions -----------------------------------------
instances json 3 --rdzv-id json --peers 3 --peer-mib 16 --json
"$PY" - "$DOC" "$T"/json.0.out "$T"/json.1.out "$T"/json.2.out <<'PYEOF' || fail "--json bandwidth data does not match docs/troubleshooting.md"
import json, re, sys
doc = open(sys.argv[1]).read()
section = doc.split("### `meshrun check --bandwidth --peers` data", 1)[1]
section = re.split(r"^#{1,4} ", section, maxsplit=1, flags=re.M)[0]
documented = {}
for m in re.finditer(r"^\| `(bandwidth\.\w+)` \| `([^`]+)` \| (\w+) \|", section, re.M):
    documented[(m.group(1), m.group(2))] = m.group(3)
types = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list}
errors, seen, printers = [], {}, 0
def walk(check, obj, prefix):
    for k, v in obj.items():
        path = prefix + k
        seen[(check, path)] = v
        if isinstance(v, list) and v and isinstance(v[0], dict):
            for item in v: walk(check, item, path + "[].")
for f in sys.argv[2:]:
    out = json.load(open(f))
    for c in out["checks"]:
        if c["name"] in ("bandwidth.peers", "bandwidth.pairs"):
            walk(c["name"], c["data"], "")
        if c["name"] == "bandwidth.pairs" and c["data"]["complete"]:
            printers += 1
            d = c["data"]
            if len(d["pairs"]) != 3 or not all(p["ok"] for p in d["pairs"]): errors.append(f"pairs not all measured: {d['pairs']}")
            if len(d["gbps"]) != 3 or any(len(r) != 3 for r in d["gbps"]): errors.append("gbps is not 3 x 3")
            if any(d["gbps"][i][i] is not None for i in range(3)): errors.append("gbps diagonal is not null")
            if any(d["gbps"][i][j] is None or d["gbps"][i][j] <= 0 for i in range(3) for j in range(3) if i != j):
                errors.append("a gbps cell is missing")
for key in sorted(set(seen) - set(documented)): errors.append(f"undocumented data field {key}")
for key in sorted(set(documented) - set(seen)): errors.append(f"documented data field {key} missing from the output")
for key, t in documented.items():
    if key in seen and not isinstance(seen[key], types[t]): errors.append(f"{key} is {type(seen[key]).__name__}, documented as {t}")
if printers != 1: errors.append(f"{printers} instances had the complete matrix, expected 1")
print("\n".join(errors) if errors else f"bandwidth data matches the {len(documented)} documented fields")
sys.exit(1 if errors else 0)
PYEOF

# --- a peer that never starts: named, after a bounded wait -------------------------------------------
instances missing 2 --rdzv-id missing --peers 3 --peers-timeout 2 --peer-mib 4
for k in 0 1; do
  [ "$(cat "$T/missing.$k.rc")" = 1 ] || fail "missing.$k: exit status $(cat "$T/missing.$k.rc"), expected 1"
  has "$T/missing.$k.out" "FAIL bandwidth.peers: only 2 of 3 instances took part in session 'missing'"
  has "$T/missing.$k.out" "#2 never joined"
  has "$T/missing.$k.out" "PASS bandwidth.pairs:"
done

# --- usage ----------------------------------------------------------------------------------------------
"$MESHRUN" check --rdzv-endpoint "$EP" --peers 3 > "$T/usage.out" 2>&1; rc=$?
[ "$rc" = 2 ] || fail "--peers without --rdzv-id: exit status $rc, expected 2"
has "$T/usage.out" "--peers needs --rdzv-id"

echo "$FAILS failure(s)"
[ "$FAILS" = 0 ]
