#!/usr/bin/env bash
# The .deb as a Debian user meets it: its control fields (name, the project version, this architecture,
# Depends naming exactly the packages of the libraries the programs load), then its files unpacked with
# `dpkg -x` into a temporary root: the layout (bin, man pages, bash and zsh completions, docs; no trainer),
# the programs run from there (--version, a 2-worker --standalone job that checks RANK/WORLD_SIZE, meshrun
# ping against the unpacked daemon), every man page renders with `man -l` (no groff warnings), and the bash
# completion completes.
#   deb_test.sh DIST_DIR VERSION
set -euo pipefail
DIST="$1" VERSION="$2"
fail() { echo "FAIL: $*" >&2; exit 1; }
WORK="$(mktemp -d)"
DAEMON_PID=""
cleanup() { [ -n "$DAEMON_PID" ] && kill "$DAEMON_PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
PROGRAMS=(meshrun meshrun-rendezvous)

arch="$(dpkg --print-architecture)"
deb="$DIST/meshrun_${VERSION}_${arch}.deb"
[ -f "$deb" ] || fail "no $deb (run scripts/build_packages.sh)"
echo "deb: $(basename "$deb"), $(du -k "$deb" | cut -f1) KiB"
field() { dpkg-deb -f "$deb" "$1"; }
[ "$(field Package)" = meshrun ] || fail "Package is '$(field Package)'"
[ "$(field Version)" = "$VERSION" ] || fail "Version is '$(field Version)', the project version is $VERSION"
[ "$(field Architecture)" = "$arch" ] || fail "Architecture is '$(field Architecture)'"

ROOT="$WORK/root"
dpkg -x "$deb" "$ROOT"

# --- Depends: exactly the packages that own the libraries the programs load ---
depends="$(field Depends)"
owner_of() {  # the package that ships a library, whichever spelling of its path dpkg knows (/lib, /usr/lib)
  local path
  for path in "$1" "$(readlink -f "$1")" "/usr$1"; do
    dpkg -S "$path" 2>/dev/null | head -n1 | cut -d: -f1 | grep . && return 0
  done
  fail "no installed package owns $1"
}
owners=()
for program in "${PROGRAMS[@]}"; do
  if ldd "$ROOT/usr/bin/$program" | grep -E "not found|libspdlog|libfmt|libstdc\+\+"; then
    fail "$program loads a library the package does not provide or depend on (above)"
  fi
  while read -r lib; do
    owners+=("$(owner_of "$lib")")
  done < <(ldd "$ROOT/usr/bin/$program" | grep -o '/[^ ]*\.so[^ ]*')
done
mapfile -t owners < <(printf '%s\n' "${owners[@]}" | sort -u)
mapfile -t declared < <(tr ',' '\n' <<<"$depends" | sed -E 's/^ *([^ (]+).*/\1/' | sort -u)
[ "${owners[*]}" = "${declared[*]}" ] ||
  fail "Depends ($depends) names ${declared[*]}, but the programs load libraries of: ${owners[*]}"
echo "Depends: $depends"
if [ "$(id -u)" -eq 0 ]; then
  dpkg --dry-run -i "$deb" >/dev/null || fail "dpkg --dry-run -i refuses the package on this system"
fi

# --- layout ---
for program in "${PROGRAMS[@]}"; do
  for f in "usr/share/man/man1/$program.1.gz" "usr/share/bash-completion/completions/$program" \
           "usr/share/zsh/site-functions/_$program"; do
    [ -f "$ROOT/$f" ] || fail "the package lacks /$f"
  done
  [ -x "$ROOT/usr/bin/$program" ] || fail "the package lacks /usr/bin/$program"
done
for f in usr/share/doc/meshrun/README.md usr/share/doc/meshrun/docs/launcher.md usr/share/doc/meshrun/docs/daemon.md; do
  [ -f "$ROOT/$f" ] || fail "the package lacks /$f"
done
extra="$(cd "$ROOT" && find . -type f | grep -vE '^\./usr/(bin/meshrun(-rendezvous)?|share/(man/man1/meshrun(-rendezvous)?\.1\.gz|bash-completion/completions/meshrun(-rendezvous)?|zsh/site-functions/_meshrun(-rendezvous)?|doc/meshrun/.*\.md))$' || true)"
[ -z "$extra" ] || fail "unexpected files in the package: $extra"

# --- the programs, run from the unpacked root ---
bin="$ROOT/usr/bin"
for program in "${PROGRAMS[@]}"; do
  [ "$("$bin/$program" --version)" = "$program $VERSION" ] || fail "$program --version says '$("$bin/$program" --version)'"
done
mkdir "$WORK/out"
(cd "$WORK" && OUT="$WORK/out" "$bin/meshrun" --standalone --nproc-per-node 2 \
   /bin/sh -c 'echo "$RANK $WORLD_SIZE $LOCAL_RANK" >"$OUT/rank$RANK"') || fail "the standalone job exited $?"
[ "$(cat "$WORK/out/rank0")" = "0 2 0" ] && [ "$(cat "$WORK/out/rank1")" = "1 2 1" ] ||
  fail "workers saw RANK WORLD_SIZE LOCAL_RANK: '$(cat "$WORK"/out/rank* 2>/dev/null | tr '\n' ',')', want '0 2 0,1 2 1'"
echo "standalone job: 2 workers with RANK/WORLD_SIZE/LOCAL_RANK 0 2 0 and 1 2 1"
"$bin/meshrun-rendezvous" --host 127.0.0.1 --port 0 --log-level warn >"$WORK/daemon.out" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 100); do grep -qs "listening on" "$WORK/daemon.out" && break; sleep 0.1; done
port="$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$WORK/daemon.out" | head -n1)"
[ -n "$port" ] || fail "meshrun-rendezvous did not announce its port: $(cat "$WORK/daemon.out")"
"$bin/meshrun" ping -c 2 -i 0.1 "127.0.0.1:$port" >"$WORK/ping.out" || fail "meshrun ping of the daemon failed: $(cat "$WORK/ping.out")"

# --- man pages render; the bash completion completes ---
for program in "${PROGRAMS[@]}"; do
  page="$ROOT/usr/share/man/man1/$program.1.gz"
  text="$(MANWIDTH=100 MANPAGER=cat man -l "$page" 2>"$WORK/man.err")" || fail "man -l $page failed: $(cat "$WORK/man.err")"
  for want in NAME SYNOPSIS OPTIONS "$program $VERSION" "--help"; do
    grep -qF -- "$want" <<<"$text" || fail "man -l $page does not show '$want'"
  done
  warnings="$(zcat "$page" | groff -man -Tutf8 -ww -z 2>&1)"
  [ -z "$warnings" ] || fail "groff warns about $page: $warnings"
done
page_text="$(env MANPAGER=cat man -l "$ROOT/usr/share/man/man1/meshrun.1.gz")"
grep -qF -- "--nproc-per-node" <<<"$page_text" || fail "meshrun's page does not show --nproc-per-node (in ASCII hyphens)"
got="$(cd "$WORK" && bash --norc -c "source '$ROOT/usr/share/bash-completion/completions/meshrun'
  COMP_WORDS=(meshrun --nproc); COMP_CWORD=1; _meshrun; echo \"\${COMPREPLY[*]}\"")"
[ "$got" = "--nproc-per-node --nproc_per_node" ] || fail "bash completes 'meshrun --nproc' to '$got'"
echo "man pages render; bash completion completes"
echo "1 passed, 0 failed"
