#!/bin/bash
# meshrun's startup hook hides no sitecustomize: a worker of a meshrun run *inside* a meshrun worker (two
# hook folders on PYTHONPATH) and the user's own sitecustomize after them: the user's runs, and is the
# module Python knows as sitecustomize; no "Error in sitecustomize" (the two hooks must not chain into each
# other). Usage: hook_chain_test.sh MESHRUN PYTHON
MESHRUN=$1 PYTHON=$2
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
mkdir -p "$W/user"
echo "open('$W/user_ran', 'w').close()" > "$W/user/sitecustomize.py"
cat > "$W/worker.py" << EOF2
import sys
print("SITECUSTOMIZE=" + sys.modules["sitecustomize"].__file__)
EOF2
PYTHONPATH="$W/user" "$MESHRUN" --standalone --nproc-per-node 1 --no-python \
  "$MESHRUN" --standalone --nproc-per-node 1 --no-python "$PYTHON" "$W/worker.py" > "$W/out" 2>&1
rc=$?
fails=0
[ "$rc" = 0 ] || { echo "FAILED: nested meshrun exited $rc"; fails=1; }
grep -q "SITECUSTOMIZE=$W/user/sitecustomize.py" "$W/out" || { echo "FAILED: the user's sitecustomize is not the one Python knows"; fails=1; }
[ -f "$W/user_ran" ] || { echo "FAILED: the user's sitecustomize did not run"; fails=1; }
grep -q "Error in sitecustomize\|RecursionError" "$W/out" && { echo "FAILED: sitecustomize errors"; fails=1; }
[ "$fails" = 0 ] || cat "$W/out"
exit $fails
