#!/usr/bin/env bash
# Fails, naming the files, when a C++ source differs from what clang-format makes of it (.clang-format).
# Fix with: clang-format -i <files>. ctest runs this as lint.format.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v clang-format >/dev/null || { echo "clang-format is not installed (apt-get install clang-format, or scripts/setup.sh)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' | grep -v '^third_party/')
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "not formatted (clang-format -i these): ${bad[*]}" >&2
  exit 1
fi
echo "${#files[@]} files formatted"
