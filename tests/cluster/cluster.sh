# cluster.sh: turns this machine into N "nodes" for tests (source it; bash only). Each node is a network
# namespace on a private bridge, with its own address 10.231.0.(i+1), host name node<i> and /etc/hosts
# (private UTS and mount namespaces per command, /etc itself is never edited). Nothing can leave the
# nodes: they have no default route, and no route is added to the root namespace (the host's own
# routing table is never touched, so a host that uses this subnet keeps its traffic).
#
#   mc_init N          create the nodes (exits 77 with the reason when namespaces cannot be made); with
#                      MC_FAMILY=6 set before, their network is IPv6 only: fd31:231::(i+1)/64 on eth0
#   mc_add_net IF SUBNET  one more network between all nodes: interface IF on node I is SUBNET.(I+1)/24
#   mc_on I CMD...     run CMD on node I;  mc_spawn I LOG CMD...: in the background, pid in MC_PID
#   mc_sshd_up I       sshd on node I:22, key auth as root; MC_SSH_OPTS has the client options
#   mc_slurm_up        munged + slurmctld on node0 + one slurmd per node; SLURM_CONF exported
#   faults: mc_kill9 PID, mc_stop PID, mc_cont PID, mc_link_down I / mc_link_up I,
#           mc_drop_port I PORT / mc_undrop_port I PORT, mc_partition I J / mc_heal I J
#   mc_cpu_limit PID PERCENT   PID gets PERCENT of one core (a CPU cgroup, removed at cleanup)
#   mc_worker_pid I PATTERN    the first process on node I whose command line matches PATTERN
#   mc_job_pids MARKER         pids on any node whose environment holds MARKER (one job's processes)
#   mc_expect_gone MARKER SECS wait (bounded) until no such process is left; fails and lists them if any
# Cleanup runs from an EXIT trap, also after failures: every process in every namespace is killed by pid,
# the namespaces and the daemons' files are removed, and the function checks that no pid is left.
set -u

MC_SUBNET=10.231.0
MC_SUBNET6=fd31:231:
MC_FAMILY=${MC_FAMILY:-4}
source "$(dirname "${BASH_SOURCE[0]}")/../support/skip.sh"
MC_TAG=mrc$$                         # namespace prefix, unique per test process
MC_FAILS=0

mc_fail() { echo "FAILED: $*"; MC_FAILS=$((MC_FAILS + 1)); }
mc_ip() { if [ "$MC_FAMILY" = 6 ]; then echo "$MC_SUBNET6:$(($1 + 1))"; else echo "$MC_SUBNET.$(($1 + 1))"; fi; }
mc_ns() { echo "${MC_TAG}n$1"; }
mc_now() { date +%s.%N; }
mc_elapsed() { awk -v a="$1" -v b="$(mc_now)" 'BEGIN { printf "%.2f", b - a }'; }

mc_init() {
  MC_N=$1
  if [ "$(id -u)" != 0 ]; then skip_or_fail "network namespaces need root (running as uid $(id -u))"; fi
  MC_DIR=$(mktemp -d /tmp/meshrun-cluster-XXXXXX)
  chmod 755 "$MC_DIR"
  if ! ip netns add "${MC_TAG}sw" 2> "$MC_DIR/netns.err"; then
    local why; why=$(cat "$MC_DIR/netns.err"); rm -rf "$MC_DIR"
    skip_or_fail "cannot create a network namespace: $why"
  fi
  trap mc_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  export MC_HOSTS=$MC_DIR/hosts
  { echo "127.0.0.1 localhost"; for i in $(seq 0 $((MC_N - 1))); do echo "$(mc_ip "$i") node$i"; done; } > "$MC_HOSTS"
  local sw="${MC_TAG}sw" i prefix=24 nodad=""
  # IPv6 addresses without duplicate address detection: usable at once, not "tentative" for a second.
  [ "$MC_FAMILY" = 6 ] && { prefix=64; nodad=nodad; }
  MC_NETS=1
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  for i in $(seq 0 $((MC_N - 1))); do
    ip netns add "$(mc_ns "$i")"
    ip link add "${MC_TAG}v$i" netns "$sw" type veth peer name eth0 netns "$(mc_ns "$i")"
    ip -n "$sw" link set "${MC_TAG}v$i" master br0 up
    ip -n "$(mc_ns "$i")" addr add "$(mc_ip "$i")/$prefix" dev eth0 $nodad
    ip -n "$(mc_ns "$i")" link set lo up
    ip -n "$(mc_ns "$i")" link set eth0 up
  done
  echo "cluster: $MC_N nodes ($(mc_ip 0) to $(mc_ip $((MC_N - 1))), namespaces ${MC_TAG}n*), files in $MC_DIR"
}

# mc_add_net IF SUBNET: another bridge in the switch and, on every node, an interface IF with address
# SUBNET.(I+1)/24 on it (two networks between the same nodes: a fast and a management one, say).
mc_add_net() {
  local ifname=$1 subnet=$2 sw="${MC_TAG}sw" i
  MC_NETS=$((MC_NETS + 1))
  ip -n "$sw" link add "br$MC_NETS" type bridge
  ip -n "$sw" link set "br$MC_NETS" up
  for i in $(seq 0 $((MC_N - 1))); do
    ip link add "${MC_TAG}n${MC_NETS}v$i" netns "$sw" type veth peer name "$ifname" netns "$(mc_ns "$i")"
    ip -n "$sw" link set "${MC_TAG}n${MC_NETS}v$i" master "br$MC_NETS" up
    ip -n "$(mc_ns "$i")" addr add "$subnet.$((i + 1))/24" dev "$ifname"
    ip -n "$(mc_ns "$i")" link set "$ifname" up
  done
}

# nsenter (not `ip netns exec`) keeps the host's /sys, which slurmd needs.
mc_on() {
  local i=$1; shift
  nsenter --net="/run/netns/$(mc_ns "$i")" unshare --uts --mount \
    sh -c 'mount --bind "$MC_HOSTS" /etc/hosts && hostname "$0" && exec "$@"' "node$i" "$@"
}

# mc_spawn I LOG CMD...: CMD on node I in the background, output to LOG; MC_PID is CMD's own pid.
mc_spawn() {
  local i=$1 log=$2; shift 2
  nsenter --net="/run/netns/$(mc_ns "$i")" unshare --uts --mount \
    sh -c 'mount --bind "$MC_HOSTS" /etc/hosts && hostname "$0" && exec "$@"' "node$i" "$@" > "$log" 2>&1 &
  MC_PID=$!
}

mc_all_ns() { local i; for i in $(seq 0 $((MC_N - 1))); do mc_ns "$i"; done; echo "${MC_TAG}sw"; }

mc_cleanup() {
  local rc=$? ns pids left="" cg
  trap - EXIT
  for ns in $(mc_all_ns); do
    [ -e "/run/netns/$ns" ] || continue
    pids=$(ip netns pids "$ns"); [ -n "$pids" ] && kill -CONT $pids 2> /dev/null && kill $pids 2> /dev/null
  done
  for _ in $(seq 20); do
    pids=""; for ns in $(mc_all_ns); do [ -e "/run/netns/$ns" ] && pids="$pids$(ip netns pids "$ns")"; done
    [ -z "$pids" ] && break; sleep 0.1
  done
  for ns in $(mc_all_ns); do
    [ -e "/run/netns/$ns" ] || continue
    pids=$(ip netns pids "$ns"); [ -n "$pids" ] && kill -9 $pids 2> /dev/null
  done
  for _ in $(seq 30); do
    left=""; for ns in $(mc_all_ns); do [ -e "/run/netns/$ns" ] && left="$left $(ip netns pids "$ns" | tr '\n' ' ')"; done
    [ -z "$(echo $left)" ] && break; sleep 0.1
  done
  [ -n "$(echo $left)" ] && echo "cleanup: processes still in the namespaces: $left"
  for ns in $(mc_all_ns); do [ -e "/run/netns/$ns" ] && ip netns del "$ns"; done
  [ -f "${MC_DIR:-/nonexistent}/munge/munged.pid" ] && kill "$(cat "$MC_DIR/munge/munged.pid")" 2> /dev/null
  for cg in $MC_CGROUPS; do rmdir "$cg" 2> /dev/null; done   # empty now: their processes are gone
  if [ "${MC_KEEP:-0}" = 1 ]; then echo "cleanup: kept $MC_DIR"; else rm -rf "${MC_DIR:?}"; fi
  exit $rc
}

# ---- OpenSSH ----
mc_sshd_up() {
  local i=$1 d=$MC_DIR/ssh
  mkdir -p "$d" && chmod 700 "$d"
  [ -f "$d/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$d/host_ed25519"
  [ -f "$d/id_ed25519" ] || { ssh-keygen -q -t ed25519 -N '' -f "$d/id_ed25519"; cp "$d/id_ed25519.pub" "$d/authorized_keys"; }
  mkdir -p /run/sshd && chmod 755 /run/sshd
  cat > "$d/sshd_config.node$i" << EOF2
ListenAddress $(mc_ip "$i"):22
HostKey $d/host_ed25519
PidFile $d/sshd.node$i.pid
AuthorizedKeysFile $d/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
EOF2
  mc_on "$i" /usr/sbin/sshd -f "$d/sshd_config.node$i" -E "$d/sshd.node$i.log"
  MC_SSH_OPTS="-i $d/id_ed25519 -o IdentitiesOnly=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
}
mc_sshd_down() { [ -f "$MC_DIR/ssh/sshd.node$1.pid" ] && kill "$(cat "$MC_DIR/ssh/sshd.node$1.pid")" 2> /dev/null; sleep 0.2; }

# ---- munge + SLURM: slurmctld on node0, one slurmd per node ----
mc_slurm_up() {
  local m=$MC_DIR/munge s=$MC_DIR/slurm i
  mkdir -p "$m" && chmod 755 "$m"
  mungekey --create --keyfile="$m/munge.key" && chmod 600 "$m/munge.key"
  mc_on 0 munged -S "$m/munge.socket.2" --key-file="$m/munge.key" --log-file="$m/munged.log" \
    --pid-file="$m/munged.pid" --seed-file="$m/munged.seed" || return 1
  mkdir -p "$s/state"
  cat > "$s/slurm.conf" << EOF2
ClusterName=mc
SlurmctldHost=node0($(mc_ip 0))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$m/munge.socket.2
StateSaveLocation=$s/state
SlurmdSpoolDir=$s/spool/%n
SlurmctldPidFile=$s/slurmctld.pid
SlurmdPidFile=$s/slurmd.%n.pid
SlurmctldLogFile=$s/slurmctld.log
SlurmdLogFile=$s/slurmd.%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
SwitchType=switch/none
KillWait=5
EOF2
  for i in $(seq 0 $((MC_N - 1))); do
    echo "NodeName=node$i NodeAddr=$(mc_ip "$i") NodeHostname=node$i CPUs=2 State=UNKNOWN" >> "$s/slurm.conf"
    mkdir -p "$s/spool/node$i"
  done
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >> "$s/slurm.conf"
  export SLURM_CONF=$s/slurm.conf
  mc_on 0 slurmctld -c || return 1
  for i in $(seq 0 $((MC_N - 1))); do mc_on "$i" slurmd -N "node$i" || return 1; done
  for _ in $(seq 100); do
    [ "$(mc_on 0 sinfo -h -t idle -o %D 2> /dev/null)" = "$MC_N" ] && return 0; sleep 0.2
  done
  echo "slurm nodes not idle after 20 s"; mc_on 0 sinfo; return 1
}

# ---- faults ----
mc_kill9() { kill -9 "$1"; }
# mc_etcd_up DIR: a 3-member etcd cluster on nodes 0-2 (data and logs in DIR), healthy within 30 s or the test
# ends; the members' pids in E[0..2] (the caller's array).
mc_etcd_up() {
  local i cluster="" dir=$1
  for i in 0 1 2; do cluster+="${cluster:+,}e$i=http://$(mc_ip "$i"):2380"; done
  for i in 0 1 2; do
    mc_spawn "$i" "$dir/etcd$i.log" etcd --name "e$i" --data-dir "$dir/etcd$i" \
      --listen-client-urls "http://$(mc_ip "$i"):2379" --advertise-client-urls "http://$(mc_ip "$i"):2379" \
      --listen-peer-urls "http://$(mc_ip "$i"):2380" --initial-advertise-peer-urls "http://$(mc_ip "$i"):2380" \
      --initial-cluster "$cluster" --initial-cluster-token "$MC_TAG" --initial-cluster-state new
    E[$i]=$MC_PID
  done
  for _ in $(seq 150); do
    local healthy=0
    for i in 0 1 2; do mc_on "$i" curl -sf --max-time 1 "http://$(mc_ip "$i"):2379/health" > /dev/null && healthy=$((healthy + 1)); done
    [ "$healthy" = 3 ] && { echo "etcd: 3 members healthy ($(etcd --version | head -1))"; return 0; }
    sleep 0.2
  done
  echo "FAILED: etcd cluster not healthy after 30 s"; tail -5 "$dir"/etcd*.log; exit 1
}
mc_kill_node() { ip netns pids "$(mc_ns "$1")" | xargs -r kill -9; }   # the whole node: every process in it
mc_stop() { kill -STOP "$1"; }
mc_cont() { kill -CONT "$1"; }
mc_link_down() { ip -n "${MC_TAG}sw" link set "${MC_TAG}v$1" down; }   # cable pulled at the switch
mc_link_up() { ip -n "${MC_TAG}sw" link set "${MC_TAG}v$1" up; }
mc_drop_port() { nsenter --net="/run/netns/$(mc_ns "$1")" iptables -A INPUT -i eth0 -p tcp --dport "$2" -j DROP; }
mc_undrop_port() { nsenter --net="/run/netns/$(mc_ns "$1")" iptables -D INPUT -i eth0 -p tcp --dport "$2" -j DROP; }
mc_partition() {   # I and J cannot reach each other; both still reach everyone else
  nsenter --net="/run/netns/$(mc_ns "$1")" iptables -A INPUT -s "$(mc_ip "$2")" -j DROP
  nsenter --net="/run/netns/$(mc_ns "$2")" iptables -A INPUT -s "$(mc_ip "$1")" -j DROP
}
mc_heal() {
  nsenter --net="/run/netns/$(mc_ns "$1")" iptables -D INPUT -s "$(mc_ip "$2")" -j DROP
  nsenter --net="/run/netns/$(mc_ns "$2")" iptables -D INPUT -s "$(mc_ip "$1")" -j DROP
}

# ---- job processes ----
mc_job_pids() {
  local ns p
  for ns in $(mc_all_ns); do
    for p in $(ip netns pids "$ns" 2> /dev/null); do
      [ "$(cat /proc/$p/stat 2> /dev/null | awk '{print $3}')" = Z ] && continue   # zombies await PID 1
      tr '\0' '\n' < /proc/$p/environ 2> /dev/null | grep -qxF "$1" && echo "$p"
    done
  done
}
mc_expect_gone() {
  local marker=$1 secs=$2 pids t0; t0=$(mc_now)
  while :; do
    pids=$(mc_job_pids "$marker" | tr '\n' ' ')
    [ -z "$pids" ] && return 0
    if [ "$(awk -v e="$(mc_elapsed "$t0")" -v s="$secs" 'BEGIN{print (e > s)}')" = 1 ]; then
      mc_fail "processes of the job left after ${secs} s:"; for p in $pids; do ps -o pid,stat,args -p "$p" | tail -n +2; done
      kill -9 $pids 2> /dev/null; return 1
    fi
    sleep 0.1
  done
}

# mc_wait_for FILE TEXT SECS: until FILE contains TEXT (fixed string); prints the seconds waited. rc 1 at the deadline.
mc_wait_for() {
  local t0; t0=$(mc_now)
  while ! grep -qF -- "$2" "$1" 2> /dev/null; do
    [ "$(awk -v e="$(mc_elapsed "$t0")" -v s="$3" 'BEGIN{print (e > s)}')" = 1 ] && return 1
    sleep 0.05
  done
  mc_elapsed "$t0"
}
# mc_wait_exit PID SECS: bounded wait for a background job of this shell; its exit status in MC_RC (124: hung).
mc_wait_exit() {
  local t0; t0=$(mc_now)
  while kill -0 "$1" 2> /dev/null && [ "$(awk -v e="$(mc_elapsed "$t0")" -v s="$2" 'BEGIN{print (e > s)}')" = 0 ]; do sleep 0.05; done
  if kill -0 "$1" 2> /dev/null; then MC_RC=124; kill -9 "$1" 2> /dev/null; wait "$1" 2> /dev/null; return 1; fi
  wait "$1"; MC_RC=$?
}
mc_count_files() { ls "$1" 2> /dev/null | grep -c -- "$2"; }

# ---- CPU limits ----
# mc_cpu_limit PID PERCENT: PID (and what it starts later) gets PERCENT of one core: cgroup v2's cpu.max where the
# unified hierarchy has the cpu controller, else v1's CFS quota. The cgroup goes with the cleanup. rc 1 on failure.
MC_CGROUPS=""
mc_cpu_limit() {
  local cg quota=$(($2 * 1000))
  if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2> /dev/null; then
    cg=/sys/fs/cgroup/${MC_TAG}cpu$1
    grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu > /sys/fs/cgroup/cgroup.subtree_control
    mkdir -p "$cg" && echo "$quota 100000" > "$cg/cpu.max" || return 1
  else
    cg=/sys/fs/cgroup/cpu/${MC_TAG}cpu$1
    mkdir -p "$cg" && echo 100000 > "$cg/cpu.cfs_period_us" && echo "$quota" > "$cg/cpu.cfs_quota_us" || return 1
  fi
  MC_CGROUPS="$MC_CGROUPS $cg"
  echo "$1" > "$cg/cgroup.procs"
}
# mc_worker_pid I PATTERN: the first process on node I whose command line matches PATTERN (grep -E).
mc_worker_pid() {
  local p
  for p in $(ip netns pids "$(mc_ns "$1")"); do
    tr '\0' ' ' < "/proc/$p/cmdline" 2> /dev/null | grep -qE -- "$2" && { echo "$p"; return 0; }
  done
  return 1
}
