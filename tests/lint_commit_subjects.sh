#!/usr/bin/env bash
# History that reads: every commit after the baseline has a subject of at most 72 characters and, when it has a
# body, a blank line 2: the rules of scripts/commit-msg (the hook scripts/setup.sh installs), checked here for
# the commits made without it. Most subjects before the baseline are longer, hence the baseline.
# A commit that breaks the rules is reworded before it is pushed (git rebase -i BASELINE, "reword"); one already
# on main can only be stepped over: move BASELINE past it, saying why in the commit.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASELINE=f225392
# shellcheck source=support/skip.sh
source "$(dirname "${BASH_SOURCE[0]}")/support/skip.sh"

command -v git > /dev/null || skip_or_fail "git is not installed: no history to read"
if ! top=$(git -C "$ROOT" rev-parse --show-toplevel 2>&1); then
  skip_or_fail "$ROOT is not a git checkout (an unpacked tarball?): no history to read (git: ${top%%$'\n'*})"
fi
if [ "$(realpath "$top")" != "$(realpath "$ROOT")" ]; then
  skip_or_fail "$ROOT is not a git checkout of its own (it sits in $top's): no history of its own to read"
fi
git -C "$ROOT" cat-file -e "$BASELINE^{commit}" 2> /dev/null ||
  skip_or_fail "the baseline commit $BASELINE is not in this clone (a shallow clone? git fetch --unshallow)"
if ! git -C "$ROOT" merge-base --is-ancestor "$BASELINE" HEAD; then
  echo "HEAD ($(git -C "$ROOT" log -1 --format='%h %s')) does not descend from the baseline $BASELINE:" \
    "a branch from before it? rebase it onto main" >&2
  echo "0 passed, 1 failed"
  exit 1
fi

message=$(mktemp)
trap 'rm -f "$message"' EXIT
mapfile -t commits < <(git -C "$ROOT" rev-list --reverse "$BASELINE..HEAD")
bad=0
for commit in "${commits[@]}"; do
  git -C "$ROOT" log -1 --format=%B "$commit" > "$message"
  if ! problems=$("$ROOT/scripts/commit-msg" --verbatim "$message" 2>&1); then
    echo "$(git -C "$ROOT" log -1 --format='%h %an %ad' --date=short "$commit"):" >&2
    echo "  ${problems//$'\n'/$'\n'  }" >&2
    bad=$((bad + 1))
  fi
done
echo "${#commits[@]} commits after $BASELINE: $((${#commits[@]} - bad)) passed, $bad failed"
if ((bad)); then
  echo "Reword them before they are pushed: git rebase -i $BASELINE, marking them 'reword'." >&2
  exit 1
fi
