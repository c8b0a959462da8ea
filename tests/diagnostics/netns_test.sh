#!/bin/bash
# `meshrun ping` / `meshrun check` inside a private network namespace (root only): a daemon port that
# drops packets (iptables DROP), an address with no route, and a host name that resolves to 127.0.1.1
# in a multi-node job. Nothing leaves the namespace: it has only its own loopback.
# Exits 77 (reported as skipped) when namespaces cannot be created, except under CI=true, where that
# fails. Usage: netns_test.sh MESHRUN DAEMON
set -u
MESHRUN=$1 DAEMON=$2
source "$(dirname "$0")/../support/skip.sh"
if [ "$(id -u)" != 0 ]; then skip_or_fail "network namespaces need root (running as uid $(id -u))"; fi
NS=mrdiag$$
if ! ip netns add "$NS" 2>/tmp/$NS.err; then
  why=$(cat /tmp/$NS.err); rm -f /tmp/$NS.err
  skip_or_fail "cannot create a network namespace: $why"
fi
rm -f /tmp/$NS.err
T=$(mktemp -d /tmp/meshrun-netns-XXXXXX)
cleanup() {
  local pids; pids=$(ip netns pids "$NS" 2>/dev/null)
  [ -n "$pids" ] && kill $pids 2>/dev/null
  sleep 0.2
  pids=$(ip netns pids "$NS" 2>/dev/null); [ -n "$pids" ] && kill -9 $pids 2>/dev/null
  ip netns del "$NS" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
# scripts/setup.sh installs iptables; the test never installs anything itself.
command -v iptables > /dev/null || skip_or_fail "iptables is not installed (scripts/setup.sh installs it)"
FAILS=0
fail() { echo "FAILED: $*"; FAILS=$((FAILS + 1)); }
in_ns() { ip netns exec "$NS" "$@"; }
# run NAME EXPECTED_RC CMD...: in the namespace, bounded by a 60 s safety net (124 = it hung).
run() {
  local name=$1 want=$2; shift 2
  in_ns timeout 60 "$@" > "$T/$name.out" 2>&1; local rc=$?
  echo "== $name (rc=$rc)"; cat "$T/$name.out"
  [ "$rc" != 124 ] || fail "$name hung"
  [ "$rc" = "$want" ] || fail "$name: exit status $rc, expected $want"
}
has() { grep -qF -- "$2" "$T/$1.out" || fail "$1: output lacks '$2'"; }
lacks() { ! grep -qF -- "$2" "$T/$1.out" || fail "$1: output has '$2'"; }

ip -n "$NS" link set lo up
in_ns "$DAEMON" --host 127.0.0.1 --port 0 --log-level warn > "$T/daemon.log" 2>&1 &
for _ in $(seq 300); do grep -q '^listening on' "$T/daemon.log" && break; sleep 0.1; done
PORT=$(head -1 "$T/daemon.log" | sed -n 's/^listening on .*://p')
[ -n "$PORT" ] || { echo "FAILED: daemon did not start"; cat "$T/daemon.log"; exit 1; }
EP=127.0.0.1:$PORT

# Control: the same port answers before the DROP rule.
run ping_before 0 "$MESHRUN" ping "$EP" -c 1
has ping_before "1 sent, 1 answered"

in_ns iptables -A INPUT -p tcp --dport "$PORT" -j DROP
run ping_drop 1 "$MESHRUN" ping "$EP" -c 2 -i 0.1 -W 1
has ping_drop "[timeout]"; has ping_drop "2 sent, 0 answered, 100.0% loss"; has ping_drop "failures: 2 x timeout"
run check_drop 1 "$MESHRUN" check --rdzv-endpoint "$EP" --rdzv-id job --timeout 1 --bandwidth
has check_drop "FAIL endpoint.tcp: [timeout]"; has check_drop "verdict: FAIL"
lacks check_drop "rdzv."; lacks check_drop "bandwidth.tcp"
run check_drop_json 1 "$MESHRUN" check --rdzv-endpoint "$EP" --timeout 1 --json
has check_drop_json '"outcome": "timeout"'
in_ns iptables -D INPUT -p tcp --dport "$PORT" -j DROP
run ping_after 0 "$MESHRUN" ping "$EP" -c 1
has ping_after "1 sent, 1 answered"

# No route: the namespace has only loopback, so connect() fails at once and nothing is sent.
run ping_unreach 1 "$MESHRUN" ping 10.200.99.1:29400 -c 1
has ping_unreach "[unreachable]"
run check_unreach 1 "$MESHRUN" check --rdzv-endpoint 10.200.99.1:29400
has check_unreach "FAIL host.route: no route from this host to 10.200.99.1"
has check_unreach "FAIL endpoint.tcp: [unreachable]"

# Debian's 127.0.1.1 host name, in a two-node job: a warning, and loopback-only interfaces fail.
printf '127.0.0.1 localhost\n127.0.1.1 diagnode\n' > "$T/hosts"
run check_hostname 1 unshare --uts --mount sh -c \
  'hostname diagnode && mount --bind "$0" /etc/hosts && exec "$@"' "$T/hosts" "$MESHRUN" check --nnodes 2
has check_hostname "WARN host.name: host name 'diagnode' resolves to 127.0.1.1 (loopback)"
has check_hostname "FAIL host.interfaces"
run check_single 0 unshare --uts --mount sh -c \
  'hostname diagnode && mount --bind "$0" /etc/hosts && exec "$@"' "$T/hosts" "$MESHRUN" check --nnodes 1
has check_single "PASS host.name: host name 'diagnode' resolves to 127.0.1.1"

echo "$FAILS failure(s)"
[ "$FAILS" = 0 ]
