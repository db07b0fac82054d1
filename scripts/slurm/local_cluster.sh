#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for tests: munge + slurmctld + slurmd on localhost.
#   scripts/slurm/local_cluster.sh start   installs slurm-wlm and munge if missing (root), writes
#                                          a config under $SLURM_TEST_DIR, starts the daemons
#   scripts/slurm/local_cluster.sh stop    stops them
# Needs root (the daemons run as root here). Everything lives in $SLURM_TEST_DIR
# (default /tmp/launch-slurm); the system's own /etc/slurm is not touched. slurmctld listens on
# $SLURM_TEST_PORT (default 16817), slurmd on the next port: two clusters (a developer's and the
# tests') may run side by side with different directories and ports.
# Exit codes: 0 up (or stopped); 77 cannot run here (not root, slurm not installable, daemons
# that do not come up: SKIPPED, with their logs); 1 a bug of this script (set -e).
set -euo pipefail
dir="${SLURM_TEST_DIR:-/tmp/launch-slurm}"
port="${SLURM_TEST_PORT:-16817}"
action="${1:-start}"

stop() {
  local pids=()
  for pidfile in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munge/munged.pid; do
    if [ -f "$pidfile" ]; then
      pid="$(cat "$pidfile")"
      kill "$pid" 2>/dev/null && pids+=("$pid") || true
    fi
  done
  # Bounded: a daemon still shutting down would keep its port from the next start.
  for _ in $(seq 1 100); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && return 0
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
}

# A machine where the daemons cannot run (a container without the needed privileges, ports taken)
# is no test failure of ours: SKIPPED (77), with the daemons' last words for whoever looks.
cannot_start() {
  echo "local_cluster: SKIPPED: slurm did not come up ($1); logs in $dir/log" >&2
  tail -n 5 "$dir"/log/*.log >&2 || true
  stop
  exit 77
}

if [ "$action" = stop ]; then stop; exit 0; fi
[ "$(id -u)" = 0 ] || { echo "local_cluster: SKIPPED: needs root (the daemons run as root)" >&2; exit 77; }

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null ||
    { echo "local_cluster: SKIPPED: slurm-wlm and munge are not installed and could not be installed" >&2; exit 77; }
fi

stop
rm -rf "$dir"
mkdir -p "$dir"/{spool,state,munge,log}
chmod 700 "$dir/munge"
host="$(hostname -s)"
cpus="$(nproc)"
mem="$(awk '/MemTotal/ {print int($2/1024) - 512}' /proc/meminfo)"

# munge: its own key and socket, so a system munged (if any) is left alone.
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge/munge.key"
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed" ||
  cannot_start "munged failed to start"

cat >"$dir/slurm.conf" <<CONF
ClusterName=launchtest
SlurmctldHost=$host
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldPort=$port
SlurmdPort=$((port + 1))
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
KillWait=5
# Preemption, for launch --requeue's tests: a job of the urgent partition cancels jobs of test
# that hold the CPUs it needs (they get SIGTERM, then SIGKILL after GraceTime + KillWait).
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES PriorityTier=1
PartitionName=urgent Nodes=$host MaxTime=INFINITE State=UP PriorityTier=2 GraceTime=10
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -f "$SLURM_CONF" || cannot_start "slurmctld failed to start"
slurmd -f "$SLURM_CONF" || cannot_start "slurmd failed to start"
# Bounded: 10 s for the node to register as idle.
for _ in $(seq 1 100); do
  sinfo -h -o %T 2>/dev/null | grep -qE '^idle' && { echo "SLURM_CONF=$SLURM_CONF"; exit 0; }
  sleep 0.1
done
cannot_start "the node did not become idle within 10 s"
