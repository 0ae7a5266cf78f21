# local_slurm.sh — sourced by the Slurm tests (slurm_test.sh, slurm_runner_test.sh): Slurm for real
# on this one machine. Installs slurm-wlm and munge if missing (apt-get, idempotent; set
# SLURM_INSTALL_FAILS_WITH=77 to exit with that status instead of failing when it cannot), starts
# munged, slurmctld and slurmd on localhost with a one-node configuration in a private directory
# $work (SLURM_CONF exported, nothing in /etc), waits for the node, and stops the daemons and removes
# $work on exit whatever happens.
work=$(mktemp -d /tmp/trainscope-slurm-XXXXXX)
host=$(hostname -s)
export SLURM_CONF=$work/slurm.conf

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  echo "[slurm] installing slurm-wlm and munge"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
            --no-install-recommends slurm-wlm munge >/dev/null; }; then
    echo "[slurm] SKIP: slurm-wlm and munge cannot be installed"
    exit "${SLURM_INSTALL_FAILS_WITH:-1}"
  fi
fi

cleanup() {
  set +e
  [ -f "$work/slurmd.pid" ] && kill "$(cat "$work/slurmd.pid")" 2>/dev/null
  [ -f "$work/slurmctld.pid" ] && kill "$(cat "$work/slurmctld.pid")" 2>/dev/null
  [ -f "$work/munged.pid" ] && kill "$(cat "$work/munged.pid")" 2>/dev/null
  # Wait (bounded) for them to exit, then stop what is left.
  for i in $(seq 1 100); do
    pgrep -f "(slurmd|slurmctld) -f $work|munged.*$work" >/dev/null || break
    sleep 0.1
  done
  pkill -f "slurmd -f $work" 2>/dev/null; pkill -f "slurmctld -f $work" 2>/dev/null
  pkill -f "munged.*$work" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# munge: a private key and socket
mkdir -p "$work/munge" "$work/spool/ctld" "$work/spool/d" "$work/log"
chmod 700 "$work/munge"
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$work/munge/munge.key"
munged --force --key-file="$work/munge/munge.key" --socket="$work/munge/munge.socket" \
       --pid-file="$work/munged.pid" --log-file="$work/log/munged.log" --seed-file="$work/munge/seed"

cpus=$(nproc)
cat > "$SLURM_CONF" <<CONF
ClusterName=trainscope-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge/munge.socket
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldPort=16817
SlurmdPort=16818
StateSaveLocation=$work/spool/ctld
SlurmdSpoolDir=$work/spool/d
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
ReturnToService=2
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
# Slurm 22.05 reads cgroup.conf even when no cgroup plugin is used.
printf "CgroupPlugin=cgroup/v1\nCgroupAutomount=no\nCgroupMountpoint=/sys/fs/cgroup\n" > "$work/cgroup.conf"

slurmctld -f "$SLURM_CONF" -i
slurmd -f "$SLURM_CONF"
# Poll until the node is up (a condition, bounded at 2 minutes for a loaded machine).
for i in $(seq 1 1200); do
  if sinfo -h -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then break; fi
  sleep 0.1
done
sinfo || true
if ! sinfo -h -o '%t' | grep -qE '^(idle|mix|alloc)'; then
  echo "[slurm] node did not come up"; tail -20 "$work/log/slurmctld.log" "$work/log/slurmd.log"; exit 1
fi

