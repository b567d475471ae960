#!/usr/bin/env bash
# A single-node Slurm cluster with accounting, for the tests marked `slurm`:
#   bash .ci/slurm.sh start   # install (Debian packages) if needed, configure, start, wait until idle
#   bash .ci/slurm.sh stop    # stop exactly the daemons that `start` started (their pid files)
#   bash .ci/slurm.sh status
# Daemons: munged (as munge), MariaDB (--skip-networking, its own data directory), slurmdbd,
# slurmctld and slurmd (as root). State, logs and pid files live in $SCHEDA_SLURM_STATE
# (default /tmp/scheda-slurm); the configs go to /etc/slurm, where every Slurm client looks.
# Without accounting, sacct fails and submitit cannot see a job that died before writing its
# result: a cancelled job would be waited on forever.
set -euo pipefail

STATE=${SCHEDA_SLURM_STATE:-/tmp/scheda-slurm}
CONF=/etc/slurm
DB_SOCKET=/run/mysqld/mysqld.sock

log() { echo "slurm.sh: $*" >&2; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local seconds=$1 what=$2
  shift 2
  for _ in $(seq $((seconds * 5))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  log "gave up waiting for $what after ${seconds}s"
  return 1
}

install() {
  local missing=()
  for tool in munged mariadbd slurmdbd slurmctld slurmd sbatch; do
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing slurm-wlm, slurmdbd, munge, mariadb-server (missing: ${missing[*]})"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm slurmdbd munge mariadb-server >/dev/null
  fi
}

write_configs() {
  local node
  node=$(slurmd -C | head -1)
  mkdir -p "$CONF" "$STATE"/{log,run,ctld,slurmd,db}
  cat >"$CONF/slurm.conf" <<EOF
# Written by scheda's .ci/slurm.sh: one node, accounting through slurmdbd.
ClusterName=scheda
SlurmctldHost=$(hostname -s)
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
MpiDefault=none
MailProg=/bin/true
# A node downed by hand stays down until "scontrol update ... state=resume" (the node-down test
# relies on it); one that stopped answering comes back when it registers.
ReturnToService=1
JobRequeue=1
KillWait=5
MinJobAge=300
InactiveLimit=0
SlurmdTimeout=30
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
$node State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  cat >"$CONF/slurmdbd.conf" <<EOF
# Written by scheda's .ci/slurm.sh.
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
LogFile=$STATE/log/slurmdbd.log
PidFile=$STATE/run/slurmdbd.pid
EOF
  chmod 600 "$CONF/slurmdbd.conf"
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "munged already runs: using it"
    return 0
  fi
  mkdir -p /run/munge
  chown munge:munge /run/munge
  [ -s /etc/munge/munge.key ] || runuser -u munge -- mungekey --create
  runuser -u munge -- munged --force --pid-file=/run/munge/munged.pid
  cp /run/munge/munged.pid "$STATE/run/munged.pid"
  wait_for 10 munge sh -c 'munge -n | unmunge'
}

start_mariadb() {
  mkdir -p /run/mysqld
  chown mysql:mysql /run/mysqld "$STATE/db"
  if [ ! -d "$STATE/db/mysql" ]; then
    mariadb-install-db --user=mysql --datadir="$STATE/db" --auth-root-authentication-method=socket >/dev/null
  fi
  # Its pid and log files in its own (mysql-owned) directory: mariadbd cannot write elsewhere.
  nohup mariadbd --user=mysql --datadir="$STATE/db" --socket=$DB_SOCKET --skip-networking \
    --pid-file="$STATE/db/mariadbd.pid" --log-error="$STATE/db/mariadb.log" >/dev/null 2>&1 &
  wait_for 30 MariaDB mariadb --socket=$DB_SOCKET -e "select 1"
  cp "$STATE/db/mariadbd.pid" "$STATE/run/mariadbd.pid"
  mariadb --socket=$DB_SOCKET -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
}

start_slurm() {
  slurmdbd
  wait_for 30 slurmdbd sacctmgr -n show cluster
  sacctmgr -i add cluster scheda >/dev/null 2>&1 || true
  slurmctld -c  # a clean start: no job of an earlier session comes back
  wait_for 30 slurmctld scontrol ping
  slurmd
  wait_for 30 "an idle node" sh -c 'sinfo -h -o %T | grep -q idle'
}

start() {
  if status >/dev/null 2>&1; then
    log "a cluster already answers"
    return 0
  fi
  install
  write_configs
  start_munge
  start_mariadb
  start_slurm
  log "cluster up: $(sinfo -h -o '%P %D %T %c')"
}

stop() {
  local pid
  for daemon in slurmd slurmctld slurmdbd mariadbd munged; do
    if [ -s "$STATE/run/$daemon.pid" ]; then
      pid=$(cat "$STATE/run/$daemon.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$STATE/run/$daemon.pid"
    fi
  done
  log "stopped"
}

status() {
  timeout 5 scontrol ping | grep -q UP && timeout 5 sinfo -h -o '%P %D %T'
}

case ${1:-start} in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) log "usage: $0 start|stop|status"; exit 2 ;;
esac
