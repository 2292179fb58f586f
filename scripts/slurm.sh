#!/usr/bin/env bash
# A real two-node Slurm cluster on this machine, for `inv run --hosts` with a Slurm host and its
# tests: installs munge, slurmctld, slurmd and the client commands (Debian packages) if missing,
# writes a configuration of two nodes, node1 and node2 (each with this machine's cores, half its
# memory, its own slurmd port, spool directory and log, both at 127.0.0.1), one partition "debug"
# holding both, and starts munged, slurmctld and one `slurmd -N` per node if they do not answer.
# Needs root. No cgroups (containers lack them): processes are tracked by /proc, tasks are not
# bound. SlurmdTimeout is short (20 s) so that a node whose slurmd dies is marked DOWN, and its
# jobs ended NODE_FAIL, within a test's patience; ReturnToService=2 takes it back once its slurmd
# registers again.
#
#   bash scripts/slurm.sh             start (or check) the cluster
#   bash scripts/slurm.sh start-node node2   restart one node's slurmd (after a test killed it)
set -euo pipefail
NODES=(node1 node2)
FIRST_SLURMD_PORT=17001
host=$(hostname -s)

node_answers() {  # every node of the configuration is known and idle, mixed or allocated
  local states
  states=$(sinfo -h -N -o '%N %T' 2>/dev/null | sort -u) || return 1
  for node in "${NODES[@]}"; do
    grep -qE "^${node} (idle|mixed|allocated)" <<<"$states" || return 1
  done
}

start_slurmd() {  # slurmd for node $1 (SUITE_SLURM_NODE marks its processes and their steps)
  local pidfile="/run/slurmd-$1.pid"
  if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    return 0
  fi
  SUITE_SLURM_NODE="$1" /usr/sbin/slurmd -N "$1"
}

if [ "${1:-}" = start-node ]; then
  start_slurmd "$2"
  exit 0
fi
if node_answers; then
  echo "scripts/slurm.sh: Slurm answers ($(sinfo -h -o '%P %D nodes' | head -1))"
  exit 0
fi
need=()
command -v slurmctld >/dev/null || need+=(slurmctld)
command -v slurmd >/dev/null || need+=(slurmd)
command -v sbatch >/dev/null || need+=(slurm-client)
command -v munged >/dev/null || need+=(munge)
if [ "$(id -u)" != 0 ]; then
  echo "scripts/slurm.sh: needs root (installs packages, starts daemons)" >&2
  exit 1
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "scripts/slurm.sh: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
cpus=$(nproc)
memory=$(( ($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024) / ${#NODES[@]} ))
conf=$(mktemp)
cat > "$conf" <<CONF
ClusterName=suite
SlurmctldHost=${host}(127.0.0.1)
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmctldPort=6817
SlurmUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
SlurmdTimeout=20
ReturnToService=2
MpiDefault=none
CONF
port=$FIRST_SLURMD_PORT
for node in "${NODES[@]}"; do
  echo "NodeName=${node} NodeHostname=${host} NodeAddr=127.0.0.1 Port=${port} CPUs=${cpus} RealMemory=${memory} State=UNKNOWN" >> "$conf"
  port=$((port + 1))
done
echo "PartitionName=debug Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES" >> "$conf"
mkdir -p /etc/slurm /var/spool/slurmctld /var/log/slurm /run/munge
for node in "${NODES[@]}"; do mkdir -p "/var/spool/slurmd/${node}"; done
if ! cmp -s "$conf" /etc/slurm/slurm.conf; then  # another configuration runs: start afresh
  pkill -x slurmctld || true
  pkill -x slurmd || true
  for _ in $(seq 1 40); do pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null || break; sleep 0.25; done
  cp "$conf" /etc/slurm/slurm.conf
  rm -f /var/spool/slurmctld/node_state* /var/spool/slurmctld/job_state* /var/spool/slurmctld/resv_state*
fi
rm -f "$conf"
if [ ! -s /etc/munge/munge.key ]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged
pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld
for node in "${NODES[@]}"; do start_slurmd "$node"; done
for _ in $(seq 1 80); do
  if node_answers; then
    echo "scripts/slurm.sh: Slurm ready (nodes ${NODES[*]} on ${host}, ${cpus} CPUs each, partition debug)"
    exit 0
  fi
  sleep 0.5
done
echo "scripts/slurm.sh: Slurm did not come up; see /var/log/slurm/slurmctld.log and slurmd-*.log" >&2
sinfo -N >&2 || true
exit 1
