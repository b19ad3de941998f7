#!/usr/bin/env bash
# Brings up a single-node Slurm (slurmctld + slurmd on this machine) with job accounting
# (slurmdbd on a local MariaDB, so `sacct` answers as on a production cluster) for the Slurm
# placement tests (tests/tests/slurm_*.rs). Idempotent: when the node already answers `sinfo`
# as idle and `sacct` answers, it returns at once. When Slurm cannot be started here (not
# root, no apt, ...), it prints why and exits 0: the tests then skip with their own printed
# reason. On CI (CI is set) a failure to start is an error, because the tests must run there.
#
# Layout (recipe: docs/design/distributed.md, "Testing on a real Slurm"):
#   /etc/slurm/slurm.conf          written by this script (marked "# mozart-test-cluster");
#                                  a slurm.conf without the mark is never overwritten
#   /etc/slurm/slurmdbd.conf       written by this script too (same mark), mode 0600
#   $MOZART_SLURM_DIR (/var/tmp/mozart-slurm)  state, spool, pid and log files
#   MariaDB (Debian's, started by its init script): database slurm_acct_db, user slurm
set -uo pipefail

DIR="${MOZART_SLURM_DIR:-/var/tmp/mozart-slurm}"
CONF=/etc/slurm/slurm.conf
DBD_CONF=/etc/slurm/slurmdbd.conf
MARK="# mozart-test-cluster"

say() { echo "slurm setup: $*"; }
# Cannot start: a plain note locally, an error on CI.
give_up() {
  if [ -n "${CI:-}" ]; then
    say "FAILED on CI: $*" >&2
    for log in ctld d dbd; do
      [ -f "$DIR/log/$log.log" ] && tail -n 20 "$DIR/log/$log.log" >&2
    done
    exit 1
  fi
  say "not started ($*); the Slurm tests will skip"
  exit 0
}

node_state() { timeout 10 sinfo -h -o '%T' 2>/dev/null | head -n1; }
# `sacct` answers from slurmdbd (without it: "Slurm accounting storage is disabled").
accounting() { timeout 10 sacct -n -X -j 1 >/dev/null 2>&1; }
# The controller enforces limits and knows the test QOS (a cluster set up by an older
# version of this script does not).
# (Output captured first: under pipefail, `grep -q` closing the pipe early fails the pipeline.)
limits() {
  local config qos
  config="$(timeout 10 scontrol show config 2>/dev/null)"
  qos="$(timeout 10 sacctmgr -n -P list qos format=name 2>/dev/null)"
  grep -q '^AccountingStorageEnforce .*limits' <<<"$config" && grep -qx mozart-limited <<<"$qos"
}

# Fast path: already up.
if command -v sinfo >/dev/null 2>&1 && accounting && limits; then
  case "$(node_state)" in
    idle | mixed | allocated | completing) say "already up ($(node_state)), with accounting"; exit 0 ;;
  esac
fi

[ "$(id -u)" -eq 0 ] || give_up "needs root to install packages and run slurmd"

# 1. Packages (one apt-get update, only when something is missing).
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmd >/dev/null 2>&1 \
  || ! command -v sbatch >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1 \
  || ! command -v slurmdbd >/dev/null 2>&1 || ! command -v mariadbd >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 \
    || give_up "no apt-get to install slurm-wlm, slurmdbd, mariadb-server and munge"
  say "installing slurm-wlm, slurmdbd, mariadb-server and munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null || give_up "apt-get update failed"
  apt-get install -y -qq --no-install-recommends slurm-wlm slurmdbd mariadb-server munge >/dev/null \
    || give_up "apt-get install slurm-wlm slurmdbd mariadb-server munge failed"
fi

# 2. munge (authentication between the Slurm commands and the daemons).
if [ ! -s /etc/munge/munge.key ]; then
  if command -v mungekey >/dev/null 2>&1; then mungekey -c >/dev/null 2>&1; fi
  chown munge:munge /etc/munge/munge.key 2>/dev/null
  chmod 0400 /etc/munge/munge.key 2>/dev/null
fi
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  mkdir -p /run/munge && chown munge:munge /run/munge
  su -s /bin/sh munge -c /usr/sbin/munged || give_up "munged did not start"
  for _ in $(seq 1 50); do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
    sleep 0.1
  done
  munge -n 2>/dev/null | unmunge >/dev/null 2>&1 || give_up "munge does not answer"
fi

# 3. MariaDB for slurmdbd (Debian's init script: no systemd needed). The database user is
# local to this test machine; its password guards only a throw-away accounting database.
DB_PASS=mozart-test-accounting
if ! mysqladmin ping >/dev/null 2>&1; then
  service mariadb start >/dev/null 2>&1 || give_up "MariaDB did not start (service mariadb start)"
fi
for _ in $(seq 1 50); do
  mysqladmin ping >/dev/null 2>&1 && break
  sleep 0.2
done
mysql -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
  CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" \
  || give_up "cannot create the accounting database in MariaDB"

# 4. slurm.conf and slurmdbd.conf: one node, one partition, no cgroups, accounting in
# slurmdbd.
H="$(hostname -s)"
mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log" /etc/slurm
for f in "$CONF" "$DBD_CONF"; do
  if [ -f "$f" ] && ! grep -q "^$MARK" "$f"; then
    give_up "$f exists and was not written by this script; not touching it"
  fi
done
NEW_DBD_CONF="$(
  cat <<EOF
$MARK (tests/slurm/setup.sh): accounting of the single-node test cluster
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
PidFile=$DIR/slurmdbd.pid
LogFile=$DIR/log/dbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
)"
if [ ! -f "$DBD_CONF" ] || [ "$(cat "$DBD_CONF")" != "$NEW_DBD_CONF" ]; then
  (umask 077 && printf '%s\n' "$NEW_DBD_CONF" >"$DBD_CONF")
  [ -f "$DIR/slurmdbd.pid" ] && kill "$(cat "$DIR/slurmdbd.pid")" 2>/dev/null && sleep 1
fi
# slurmdbd refuses a configuration file others can read (it holds the database password).
chmod 0600 "$DBD_CONF"

# CPUs=16 on a 2-core machine (config_overrides): the test jobs mostly sleep, and a 20-sheet
# fan-out should not queue behind two cores. The scheduler knobs shorten Slurm's own
# submit-to-start latency (batch jobs are otherwise scheduled in passes seconds apart).
# MinJobAge=30: a finished job leaves the controller's memory soon (slurmctld purges about
# a minute later), as on a busy cluster, so tests see what `sacct` says of purged jobs.
NEW_CONF="$(
  cat <<EOF
$MARK (tests/slurm/setup.sh): single-node test cluster
ClusterName=local
SlurmctldHost=$H
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/ctld.log
SlurmdLogFile=$DIR/log/d.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=100000,default_queue_depth=200
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageEnforce=limits
MpiDefault=none
ReturnToService=2
MinJobAge=30
SlurmdParameters=config_overrides
NodeName=$H CPUs=16 State=UNKNOWN
PartitionName=debug Nodes=$H Default=YES MaxTime=INFINITE State=UP
EOF
)"
if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$NEW_CONF" ]; then
  printf '%s\n' "$NEW_CONF" >"$CONF"
  # A changed config needs fresh daemons.
  for p in slurmd slurmctld; do
    [ -f "$DIR/$p.pid" ] && kill "$(cat "$DIR/$p.pid")" 2>/dev/null
  done
  sleep 1
fi

# 5. Daemons: accounting first (the controller registers with it), then the controller,
# then the node daemon.
alive() { [ -f "$DIR/$1.pid" ] && kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null; }
if ! alive slurmdbd; then
  slurmdbd || give_up "slurmdbd did not start (see $DIR/log/dbd.log)"
fi
for _ in $(seq 1 50); do
  sacctmgr -n list cluster >/dev/null 2>&1 && break
  sleep 0.2
done
# `lists WORD CMD…`: whether CMD's output has the line WORD (captured first: under pipefail,
# `grep -q` closing a pipe early would fail the pipeline).
lists() {
  local out
  out="$("${@:2}" 2>/dev/null)"
  grep -qx -- "$1" <<<"$out"
}
lists local sacctmgr -n -P list cluster format=cluster \
  || sacctmgr -i add cluster local >/dev/null \
  || give_up "slurmdbd does not answer sacctmgr (see $DIR/log/dbd.log)"
# A QOS with a per-user submit limit of 2 jobs, for the test of a fan-out larger than the
# limit (AccountingStorageEnforce=limits makes Slurm refuse a third job, as sites do).
lists mozart-limited sacctmgr -n -P list qos format=name \
  || sacctmgr -i add qos mozart-limited MaxSubmitJobsPerUser=2 >/dev/null \
  || give_up "cannot add the QOS mozart-limited (see $DIR/log/dbd.log)"
lists '.*mozart-limited.*' sacctmgr -n -P list assoc user=root format=qos \
  || sacctmgr -i modify user root set qos+=mozart-limited >/dev/null \
  || give_up "cannot let root use the QOS mozart-limited"
alive slurmctld || slurmctld -f "$CONF" || give_up "slurmctld did not start (see $DIR/log/ctld.log)"
alive slurmd || slurmd -f "$CONF" || give_up "slurmd did not start (see $DIR/log/d.log)"

# 6. Wait for the node to be idle (~3 s on these machines) and for `sacct` to answer; resume
# the node if it came up down.
for i in $(seq 1 60); do
  case "$(node_state)" in
    idle | mixed | allocated)
      if accounting; then
        say "up ($(node_state)), with accounting, after ${i} checks"
        exit 0
      fi
      ;;
    down* | drain* | drained*) scontrol update NodeName="$H" State=RESUME >/dev/null 2>&1 ;;
  esac
  sleep 0.5
done
accounting || give_up "sacct does not answer after 30 s (logs in $DIR/log)"
give_up "node not idle after 30 s (state: $(node_state); logs in $DIR/log)"
