#!/usr/bin/env bash
# Namespaces follow folders: code under common/ and proto/ ... declares meshrun (common) or meshrun::<folder>,
# tools/ meshrun::tools, tests/ meshrun::testing (and the namespaces of the code a test exercises, which it may
# reopen); a block that only forward-declares another library's types is fine. Prints each file whose `namespace meshrun...` names another top-level folder, and fails.
#   lint_namespaces.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bad=0
while IFS= read -r file; do
  top="${file%%/*}"
  case "$top" in
    common) allowed="meshrun" ;;
    tools) allowed="meshrun::tools" ;;
    tests) allowed="meshrun::testing" ;;
    *) allowed="meshrun::$top" ;;
  esac
  while IFS= read -r ns; do
    case "$ns" in
      "$allowed" | "$allowed"::*) ;;
      # a test reopens the namespace of the code it checks (an anonymous helper beside it, a using-declaration)
      meshrun::common | meshrun::proto | meshrun::rendezvous* | meshrun::launcher* | meshrun::diagnostics* | \
        meshrun::trainer* | meshrun::tools*)
        [ "$top" = tests ] || { echo "$file: namespace $ns (expected $allowed)"; bad=1; } ;;
      meshrun) [ "$top" = tests ] || { echo "$file: namespace meshrun (expected $allowed)"; bad=1; } ;;
      *) echo "$file: namespace $ns (expected $allowed)"; bad=1 ;;
    esac
  done < <(awk '
    # Each top-level `namespace meshrun... {` block, unless it only forward-declares (class X; struct Y;).
    /^namespace meshrun[a-z_:]* \{/ { name = $2; decl_only = 1; open = 1; next }
    open && /^\}/ { if (!decl_only) print name; open = 0; next }
    open && !/^(class|struct|enum class) [A-Za-z_]+;$/ && !/^$/ { decl_only = 0 }' "$file")
done < <(git ls-files 'common/*.[ch]pp' 'proto/*.[ch]pp' 'rendezvous/*.[ch]pp' 'launcher/*.[ch]pp' \
  'diagnostics/*.[ch]pp' 'trainer/*.[ch]pp' 'tools/*.[ch]pp' 'tests/*.[ch]pp')
if ((bad)); then
  echo "namespaces must follow folders (docs/architecture.md)" >&2
  exit 1
fi
echo "every namespace follows its folder"
