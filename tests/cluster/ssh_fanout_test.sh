#!/bin/bash
# `meshrun --hostfile` over real sshd in 3 node namespaces: ranks and environment on every host, host:rank
# line prefixes, .meshrun_env and --export, --include/--exclude, unreachable hosts reported before anything
# starts, and SIGTERM / SIGKILL of the local meshrun leaving nothing behind on any host. The join token (from
# .meshrun_env, and from --rdzv-conf token=) reaches every agent, and no command line on any node carries it.
# Usage: ssh_fanout_test.sh MESHRUN   (root; exits 77 when namespaces cannot be made)
MESHRUN=$1
WORKER=$(cd "$(dirname "$0")" && pwd)/worker.sh
source "$(dirname "$0")/cluster.sh"
mc_init 3
for i in 0 1 2; do mc_sshd_up $i; done
W=$MC_DIR/work; mkdir -p "$W"; cd "$W" || exit 1
printf '# three nodes\nnode0 slots=2\n\nnode1 slots=2   # second\nnode2 slots=2\n' > hostfile
TOKEN1=env-file-token-$RANDOM$RANDOM TOKEN3=conf-token-$RANDOM$RANDOM
printf 'MC_EXTRA=from-env-file\nMESHRUN_RDZV_TOKEN=%s\n' "$TOKEN1" > .meshrun_env

# no_token_in_cmdlines TOKEN JOB: every process's command line on every node (the nodes share the host's /proc) is
# read while the job runs; none may carry TOKEN. The user's own local command line (it holds --hostfile) is theirs.
no_token_in_cmdlines() {
  local p line seen=0
  for p in /proc/[0-9]*; do
    line=$(tr '\0' ' ' < "$p/cmdline" 2> /dev/null) || continue
    case $line in *meshrun-fanout*) seen=$((seen + 1)) ;; esac
    case $line in *--hostfile*) continue ;; esac
    case $line in *"$1"*) mc_fail "$2: the join token is on the command line of pid ${p#/proc/}: $line" ;; esac
  done
  [ "$seen" -ge 3 ] || mc_fail "$2: only $seen remote wrappers were running when the command lines were read"
  echo "== $2: $(ls -d /proc/[0-9]* | wc -l) command lines read, $seen remote wrappers among them, no token"
}
fanout() { echo "$MESHRUN --hostfile hostfile --ssh-opts \"$MC_SSH_OPTS\" --shutdown-timeout 3 $*"; }

# 1. Six workers on three hosts, unique ranks, WORLD_SIZE 6, output prefixed host:rank.
J=job1; D=$W/$J; mkdir -p "$D"
t0=$(mc_now)
mc_spawn 0 "$W/$J.log" env MC_JOB=$J $MESHRUN --hostfile hostfile --ssh-opts "$MC_SSH_OPTS" --export MC_JOB \
  --no-python "$WORKER" "$D"
P=$MC_PID
for _ in $(seq 200); do [ "$(mc_count_files "$D" '^a0\.r')" = 6 ] || ! kill -0 $P 2> /dev/null && break; sleep 0.1; done
echo "== $J: 6 workers up after $(mc_elapsed "$t0") s"
no_token_in_cmdlines "$TOKEN1" $J
touch "$D/finish"
mc_wait_exit $P 60; echo "== $J (rc=$MC_RC)"; cat "$W/$J.log"
[ "$MC_RC" = 0 ] || mc_fail "$J: exit status $MC_RC"
for r in 0 1 2 3 4 5; do
  f=$D/a0.r$r
  [ -f "$f" ] || { mc_fail "$J: rank $r did not run"; continue; }
  grep -qx "WORLD_SIZE=6" "$f" || mc_fail "$J: rank $r: $(grep WORLD_SIZE "$f")"
  grep -qx "GROUP_RANK=$((r / 2))" "$f" || mc_fail "$J: rank $r has $(grep GROUP_RANK "$f")"
  grep -qx "MC_EXTRA=from-env-file" "$f" || mc_fail "$J: rank $r lacks MC_EXTRA from .meshrun_env"
  h=node$((r / 2))
  grep -qF "$h:$r: worker rank $r of 6 on $h" "$W/$J.log" || mc_fail "$J: no '$h:$r:' line for rank $r"
done
mc_expect_gone MC_JOB=$J 10

# 2. --exclude node1 and --export VAR=VALUE: 2 hosts, WORLD_SIZE 4; --include node2:1 gives 1 worker on node2.
J=job2; D=$W/$J; mkdir -p "$D"; touch "$D/finish"
mc_spawn 0 "$W/$J.log" env MC_JOB=$J $MESHRUN --hostfile hostfile --ssh-opts "$MC_SSH_OPTS" --exclude node1 \
  --export MC_JOB --export MC_EXTRA=from-flag --no-python "$WORKER" "$D"
mc_wait_exit $MC_PID 60; echo "== $J (rc=$MC_RC)"; cat "$W/$J.log"
[ "$MC_RC" = 0 ] || mc_fail "$J: exit status $MC_RC"
[ "$(mc_count_files "$D" '^a0\.r')" = 4 ] || mc_fail "$J: expected 4 workers: $(ls "$D")"
grep -qx "WORLD_SIZE=4" "$D/a0.r3" 2> /dev/null || mc_fail "$J: rank 3 lacks WORLD_SIZE=4"
grep -qx "MC_EXTRA=from-flag" "$D/a0.r0" 2> /dev/null || mc_fail "$J: --export VAR=VALUE did not win over the env file"
grep -q "^node1:" "$W/$J.log" && mc_fail "$J: node1 was excluded but printed"
J=job2b; D=$W/$J; mkdir -p "$D"; touch "$D/finish"
mc_spawn 0 "$W/$J.log" env MC_JOB=$J $MESHRUN --hostfile hostfile --ssh-opts "$MC_SSH_OPTS" --include node2:1 \
  --export MC_JOB --no-python "$WORKER" "$D"
mc_wait_exit $MC_PID 60; echo "== $J (rc=$MC_RC)"; cat "$W/$J.log"
[ "$MC_RC" = 0 ] && [ "$(mc_count_files "$D" '^a0\.r')" = 1 ] || mc_fail "$J: expected rc 0 and 1 worker: rc=$MC_RC $(ls "$D")"

# 3. SIGTERM to the local meshrun stops every remote agent and worker.
J=job3; D=$W/$J; mkdir -p "$D"
mc_spawn 0 "$W/$J.log" env MC_JOB=$J $MESHRUN --hostfile hostfile --ssh-opts "$MC_SSH_OPTS" --export MC_JOB \
  --rdzv-conf read_timeout=30,token=$TOKEN3 --shutdown-timeout 3 --no-python "$WORKER" "$D"
P=$MC_PID
for _ in $(seq 200); do [ "$(mc_count_files "$D" '^a0\.r')" = 6 ] || ! kill -0 $P 2> /dev/null && break; sleep 0.1; done
[ "$(mc_count_files "$D" '^a0\.r')" = 6 ] || mc_fail "$J: the agents did not all join with --rdzv-conf token="
no_token_in_cmdlines "$TOKEN3" $J
t0=$(mc_now); kill -TERM $P
mc_wait_exit $P 60; echo "== $J: SIGTERM (rc=$MC_RC after $(mc_elapsed "$t0") s)"; cat "$W/$J.log"
[ "$MC_RC" = 143 ] || mc_fail "$J: exit status $MC_RC after SIGTERM, expected 143"
mc_expect_gone MC_JOB=$J 15 && echo "== $J: nothing left on any node $(mc_elapsed "$t0") s after SIGTERM"

# 4. SIGKILL of the local meshrun: its ssh clients die with it, and each remote wrapper sees EOF.
J=job4; D=$W/$J; mkdir -p "$D"
mc_spawn 0 "$W/$J.log" env MC_JOB=$J $MESHRUN --hostfile hostfile --ssh-opts "$MC_SSH_OPTS" --export MC_JOB \
  --shutdown-timeout 3 --no-python "$WORKER" "$D"
P=$MC_PID
for _ in $(seq 200); do [ "$(mc_count_files "$D" '^a0\.r')" = 6 ] || ! kill -0 $P 2> /dev/null && break; sleep 0.1; done
t0=$(mc_now); kill -9 $P; wait $P 2> /dev/null
mc_expect_gone MC_JOB=$J 20 && echo "== $J: SIGKILL: nothing left on any node $(mc_elapsed "$t0") s later"

# 5. Unreachable hosts are named before anything starts: node3 has no namespace (no route: ARP fails),
#    node2's sshd is down (refused). node0 and node1 must not have started anything.
echo "$(mc_ip 3) node3" >> "$MC_HOSTS"
printf 'node0 slots=1\nnode1 slots=1\nnode2 slots=1\nnode3 slots=1\n' > hostfile.bad
mc_sshd_down 2
J=job5; D=$W/$J; mkdir -p "$D"
mc_spawn 0 "$W/$J.log" env MC_JOB=$J $MESHRUN --hostfile hostfile.bad --ssh-opts "$MC_SSH_OPTS" --ssh-connect-timeout 3 \
  --export MC_JOB --no-python "$WORKER" "$D"
mc_wait_exit $MC_PID 60; echo "== $J (rc=$MC_RC)"; cat "$W/$J.log"
[ "$MC_RC" = 1 ] || mc_fail "$J: exit status $MC_RC, expected 1"
grep -q "node2: .*refused" "$W/$J.log" || mc_fail "$J: node2 (sshd down) not reported as refused"
grep -q "node3: " "$W/$J.log" || mc_fail "$J: node3 (no such node) not reported"
grep -q "nothing was started" "$W/$J.log" || mc_fail "$J: no 'nothing was started'"
[ "$(mc_count_files "$D" '^a0\.r')" = 0 ] || mc_fail "$J: workers ran although a host was unreachable"
mc_expect_gone MC_JOB=$J 5

echo "$MC_FAILS failure(s)"
[ "$MC_FAILS" = 0 ]
