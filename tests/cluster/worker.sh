#!/bin/sh
# Cluster-test worker: records its environment in $1/a<restart>.r<rank>, prints a line, then waits until
# $1/finish exists (exit 0), $1/fail.<rank>.<restart> exists (exit 3), or 120 s pass (exit 99: safety net).
d=$1
a=${TORCHELASTIC_RESTART_COUNT:-0}
env | grep -E '^(RANK|LOCAL_RANK|WORLD_SIZE|GROUP_RANK|GROUP_WORLD_SIZE|TORCHELASTIC_RESTART_COUNT|TORCHELASTIC_RUN_ID|MASTER_ADDR|MC_EXTRA)=' \
  | sort > "$d/.a$a.r$RANK.$$" && mv "$d/.a$a.r$RANK.$$" "$d/a$a.r$RANK"
echo "worker rank $RANK of $WORLD_SIZE on $(hostname) attempt $a"
i=0
while [ $i -lt 1200 ]; do
  [ -e "$d/finish" ] && exit 0
  [ -e "$d/fail.$RANK.$a" ] && { echo "rank $RANK failing on purpose" >&2; exit 3; }
  sleep 0.1; i=$((i + 1))
done
exit 99
