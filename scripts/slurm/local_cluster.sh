#!/bin/sh
# A single-node Slurm cluster on this machine, for running `attnlab sweep --emit-slurm` job
# arrays under a real scheduler (docs/sweeps.md, "A local Slurm cluster").
#
#   scripts/slurm/local_cluster.sh start    munged, slurmctld and slurmd; waits until the node is idle
#   scripts/slurm/local_cluster.sh stop     stops the daemons this script started
#   scripts/slurm/local_cluster.sh status   the daemons and `sinfo`
#   scripts/slurm/local_cluster.sh env      prints `export SLURM_CONF=...` for the client commands
#
# Needs root; installs Debian's slurm-wlm and munge when they are missing. Everything
# Slurm writes (slurm.conf, state, spool, logs, pid files) lives in $ATTNLAB_SLURM_DIR (default
# /tmp/attnlab-slurm); only the munge key is the system's (/etc/munge/munge.key, created if
# missing). The node is `localhost` with the CPUs and memory of this machine, read at start. No
# cgroup plugins (proctrack/linuxproc, task/none): the cluster runs in VMs and containers without
# systemd cgroup delegation. Client commands find the cluster through SLURM_CONF.
#
# Idempotent: `start` on a running cluster only waits for the node; `stop` on a stopped one does
# nothing.
set -eu

DIR=${ATTNLAB_SLURM_DIR:-/tmp/attnlab-slurm}
CONF=$DIR/slurm.conf
export SLURM_CONF="$CONF"
MUNGE_KEY=/etc/munge/munge.key
MUNGE_SOCKET_DIR=/run/munge

log() { echo "local_cluster: $*"; }
die() { echo "local_cluster: error: $*" >&2; exit 1; }

# pid of a running daemon from its pid file, or nothing.
running_pid() {
  [ -f "$1" ] || return 0
  pid=$(cat "$1" 2>/dev/null || true)
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
  return 0
}

need_tools() {
  [ "$(id -u)" = 0 ] || die "run as root (slurmd starts jobs as their users)"
  PATH=$PATH:/usr/sbin:/sbin
  if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || die "slurmctld or munged not found; install Slurm and MUNGE"
    log "installing slurm-wlm and munge"
    DEBIAN_FRONTEND=noninteractive apt-get install -y slurm-wlm munge >/dev/null
  fi
  for tool in munged mungekey slurmctld slurmd sinfo scontrol; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found: apt-get install -y slurm-wlm munge"
  done
}

write_conf() {
  mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log"
  cpus=$(getconf _NPROCESSORS_ONLN)
  # RealMemory in MB, a little under MemTotal so that slurmd's own reading is never below it.
  mem_mb=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 * 0.95 }' /proc/meminfo)
  tmp=$CONF.tmp.$$
  cat >"$tmp" <<EOF
# Written by scripts/slurm/local_cluster.sh: a single-node cluster on localhost.
ClusterName=attnlab
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SwitchType=switch/none
JobRequeue=1
ReturnToService=2
# Seconds between SIGTERM and SIGKILL when a job is cancelled, requeued or preempted: the time an
# attnlab run has to save its checkpoint.
KillWait=30
MinJobAge=300
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=local Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
  mv "$tmp" "$CONF"
  log "wrote $CONF (localhost: $cpus CPUs, $mem_mb MB)"
}

start_munge() {
  if [ ! -s "$MUNGE_KEY" ]; then
    mkdir -p "$(dirname "$MUNGE_KEY")"
    mungekey --create --keyfile="$MUNGE_KEY"
    chown munge:munge "$MUNGE_KEY" 2>/dev/null || true
    chmod 600 "$MUNGE_KEY"
    log "created $MUNGE_KEY"
  fi
  if [ -n "$(running_pid "$MUNGE_SOCKET_DIR/munged.pid")" ]; then return 0; fi
  mkdir -p "$MUNGE_SOCKET_DIR"
  chown munge:munge "$MUNGE_SOCKET_DIR" 2>/dev/null || true
  chmod 755 "$MUNGE_SOCKET_DIR"
  if id munge >/dev/null 2>&1; then
    runuser -u munge -- munged --pid-file="$MUNGE_SOCKET_DIR/munged.pid"
  else
    munged --force --pid-file="$MUNGE_SOCKET_DIR/munged.pid"
  fi
  log "started munged"
}

start_slurm() {
  if [ -z "$(running_pid "$DIR/slurmctld.pid")" ]; then
    slurmctld -f "$CONF"
    log "started slurmctld"
  fi
  if [ -z "$(running_pid "$DIR/slurmd.pid")" ]; then
    slurmd -f "$CONF" -N localhost
    log "started slurmd"
  fi
}

# Waits until sinfo reports the node idle (or busy with jobs: also up), at most 60 s.
wait_idle() {
  i=0
  while [ $i -lt 120 ]; do
    state=$(sinfo -h -n localhost -o %T 2>/dev/null || true)
    case "$state" in
      idle|mixed|allocated|completing) log "node localhost is $state; for the client commands: export SLURM_CONF=$CONF"; return 0 ;;
      down*|drain*) scontrol update NodeName=localhost State=RESUME 2>/dev/null || true ;;
    esac
    sleep 0.5
    i=$((i + 1))
  done
  die "node not idle after 60 s (sinfo: '${state:-no answer}'); see $DIR/log/"
}

stop_daemon() {
  pid=$(running_pid "$1")
  [ -n "$pid" ] || return 0
  kill "$pid"
  i=0
  while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  log "stopped $2 (pid $pid)"
}

case "${1:-}" in
  start)
    need_tools
    # A running cluster keeps its slurm.conf: rewriting it under the daemons would change nothing
    # until a restart and could disagree with them.
    if [ -z "$(running_pid "$DIR/slurmctld.pid")" ] || [ ! -f "$CONF" ]; then write_conf; fi
    start_munge
    start_slurm
    wait_idle
    ;;
  stop)
    stop_daemon "$DIR/slurmd.pid" slurmd
    stop_daemon "$DIR/slurmctld.pid" slurmctld
    stop_daemon "$MUNGE_SOCKET_DIR/munged.pid" munged
    ;;
  status)
    for pidfile in "$DIR/slurmctld.pid" "$DIR/slurmd.pid" "$MUNGE_SOCKET_DIR/munged.pid"; do
      pid=$(running_pid "$pidfile")
      if [ -n "$pid" ]; then state="running, pid $pid"; else state=stopped; fi
      echo "$(basename "$pidfile" .pid): $state"
    done
    if [ -n "$(running_pid "$DIR/slurmctld.pid")" ]; then sinfo; else exit 1; fi
    ;;
  env)
    echo "export SLURM_CONF=$CONF"
    ;;
  *)
    echo "usage: $0 start|stop|status|env" >&2
    exit 2
    ;;
esac
