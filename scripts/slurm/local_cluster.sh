#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for tests: munge + slurmctld + slurmd on localhost.
#   scripts/slurm/local_cluster.sh start   installs slurm-wlm and munge if missing (root), writes
#                                          a config under $SLURM_TEST_DIR, starts the daemons
#   scripts/slurm/local_cluster.sh stop    stops them
# Needs root (the daemons run as root here). Everything lives in $SLURM_TEST_DIR
# (default /tmp/launch-slurm); the system's own /etc/slurm is not touched.
set -euo pipefail
dir="${SLURM_TEST_DIR:-/tmp/launch-slurm}"
action="${1:-start}"

stop() {
  for pidfile in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munge/munged.pid; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
}

if [ "$action" = stop ]; then stop; exit 0; fi
[ "$(id -u)" = 0 ] || { echo "local_cluster: needs root" >&2; exit 77; }

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
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
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"

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
SlurmctldPort=16817
SlurmdPort=16818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
KillWait=5
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 1 100); do
  sinfo -h -o %T 2>/dev/null | grep -qE '^idle' && { echo "SLURM_CONF=$SLURM_CONF"; exit 0; }
  sleep 0.1
done
echo "local_cluster: slurm did not come up; logs in $dir/log" >&2
tail -5 "$dir"/log/*.log >&2 || true
exit 1
