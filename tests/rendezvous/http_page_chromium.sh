#!/usr/bin/env bash
# The live page in a real browser: Debian's headless Chromium loads http://127.0.0.1:PORT/ from a real
# daemon whose run has a hung rank (progress_agent flags rank 1 hung, rank 2 slow), lets the page's script
# poll the daemon (virtual time: the page's one-second timer fires several times while fetches are
# waited for), dumps the DOM, and the DOM must show the run, its ranks, HUNG on the hung rank's row,
# STRAGGLER on the slow one's, LATE with its late line on the late one's, the node's clock offset and the
# ranks' arrival figure column. Without Chromium: skipped outside CI, failed under CI=true.
#   http_page_chromium.sh DAEMON PROGRESS_AGENT
set -euo pipefail
DAEMON="$1" AGENT="$2"
# shellcheck source=../support/skip.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/skip.sh"
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROMIUM" ] || skip_or_fail "chromium is not installed (apt-get install chromium; scripts/setup.sh does)"
fail() { echo "FAIL: $*" >&2; exit 1; }

tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

"$DAEMON" --host 127.0.0.1 --port 0 --http-port 0 >"$tmp/daemon.out" 2>"$tmp/daemon.err" &
pids+=($!)
for _ in $(seq 100); do grep -q '^http on ' "$tmp/daemon.out" && break; sleep 0.1; done
endpoint=$(sed -n 's/^listening on //p' "$tmp/daemon.out")
http=$(sed -n 's/^http on //p' "$tmp/daemon.out")
[ -n "$http" ] || fail "the daemon printed no 'http on' line: $(cat "$tmp/daemon.out" "$tmp/daemon.err")"
port=${http##*:}
# GET over bash's /dev/tcp: no HTTP client needed besides the browser under test.
http_get() {
  exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
  printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' "$1" >&3
  cat <&3
  exec 3<&-
}

"$AGENT" "$endpoint" page-run node-a 4 --hung-rank 1 --slow-rank 2 --late-rank 3 --restart-hung >"$tmp/agent.out" 2>&1 &
pids+=($!)
# Until the daemon's status has the hung rank and the straggler (named once most of its readings of 5 s are
# over the threshold): the page then has something to show.
status_has_both() { http_get /api/status 2>/dev/null > "$tmp/status.json" || return 1
                    grep -q '"hung":true' "$tmp/status.json" && grep -q '"straggler":true' "$tmp/status.json"; }
for _ in $(seq 300); do
  status_has_both && break
  sleep 0.1
done
status_has_both || fail "no hung rank or no straggler in the daemon's status: $(cat "$tmp/agent.out" "$tmp/status.json")"
sleep 2  # the history gets a few samples for the curves

# --virtual-time-budget runs the page's timers in virtual time (waiting for fetches), so several polls
# happen before --dump-dom prints the DOM.
timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
  --user-data-dir="$tmp/profile" --virtual-time-budget=5000 --dump-dom "http://127.0.0.1:$port/" \
  >"$tmp/dom.html" 2>"$tmp/chromium.err" || fail "chromium failed: $(tail -20 "$tmp/chromium.err")"

dom="$tmp/dom.html"
show() { echo "--- dumped DOM ---" >&2; cat "$dom" >&2; }
grep -q 'data-polls="[1-9]' "$dom" || { show; fail "the page's script never rendered a poll"; }
grep -q '<code>page-run</code>' "$dom" || { show; fail "the run id is not on the page"; }
grep -q 'class="badge">round 1<' "$dom" || { show; fail "the run's round is not on the page"; }
grep -q 'hung 1' "$dom" || { show; fail "the restart and its cause are not on the page"; }
for rank in 0 1 2 3; do
  grep -q "data-rank=\"$rank\"" "$dom" || { show; fail "rank $rank is not on the page"; }
done
# The hung rank's row: class hung and the literal HUNG in its flags cell.
grep -Eq '<tr class="hung" data-rank="1">.*<td class="text flag hung">HUNG</td></tr>' "$dom" ||
  { show; fail "rank 1 is not flagged HUNG"; }
grep -Eq '<tr class="straggler" data-rank="2">.*<td class="text flag straggler">STRAGGLER</td></tr>' "$dom" ||
  { show; fail "rank 2 is not flagged STRAGGLER"; }
grep -Eq '<tr class="late" data-rank="3" title="rank 3 \(node-a\) is late: [^"]*">.*<td class="text flag late">LATE</td></tr>' "$dom" ||
  { show; fail "rank 3 is not flagged LATE"; }
grep -q '<div class="late-line">rank 3 (node-a) is late: it has not entered barrier #10' "$dom" ||
  { show; fail "rank 3's late line is not on the page"; }
grep -q '<path d="M' "$dom" || { show; fail "no curve was drawn"; }
grep -q '<td data-clock="node-a">+2.5 ms ± 0.3</td>' "$dom" || { show; fail "node-a's clock offset is not on the page"; }
grep -q '<th>between coll. s</th>' "$dom" || { show; fail "the ranks' arrival figure column is not on the page"; }
grep -q '<b>root cause</b> (round 0, the first of 1 failure(s)): rank 1 on ' "$dom" ||
  { show; fail "the root cause (rank 1, hung) is not on the page"; }
grep -q 'block_forever (progress_agent.py:30)' "$dom" || { show; fail "the hung rank's stack is not on the page"; }
echo "the page shows run page-run, ranks 0-3, rank 1 HUNG, rank 2 STRAGGLER and rank 3 LATE ($(grep -o 'data-polls="[0-9]*"' "$dom"))"
