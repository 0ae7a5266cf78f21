# local_slurm.sh — sourced by the Slurm tests (slurm_test.sh, slurm_runner_test.sh): Slurm for real
# on this one machine. Installs slurm-wlm and munge if missing (apt-get, idempotent; set
# SLURM_INSTALL_FAILS_WITH=77 to exit with that status instead of failing when it cannot), starts
# munged, slurmctld and slurmd on localhost with a one-node configuration in a private directory
# $work (SLURM_CONF exported, nothing in /etc), waits for the node, and stops the daemons and removes
# $work on exit whatever happens. SLURM_TEST_NODES=2: two nodes on this one host (two slurmd, `-N`,
# each its own port; Debian's slurmd runs them), named after the host and `localhost` (both resolve
# here: a rank's MASTER_ADDR is the step's first node), one CPU each, so a 2-task step spans both.
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
  for f in "$work"/slurmd*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
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
mkdir -p "$work/munge" "$work/spool/ctld" "$work/log"
chmod 700 "$work/munge"
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$work/munge/munge.key"
munged --force --key-file="$work/munge/munge.key" --socket="$work/munge/munge.socket" \
       --pid-file="$work/munged.pid" --log-file="$work/log/munged.log" --seed-file="$work/munge/seed"

cpus=$(nproc)
nodes=${SLURM_TEST_NODES:-1}
if [ "$nodes" = 2 ]; then
  node_names=("$host" localhost)
  node_lines="NodeName=$host NodeHostname=$host NodeAddr=127.0.0.1 Port=16818 CPUs=1 State=UNKNOWN
NodeName=localhost NodeHostname=$host NodeAddr=127.0.0.1 Port=16819 CPUs=1 State=UNKNOWN"
else
  node_names=("$host")
  node_lines="NodeName=$host CPUs=$cpus State=UNKNOWN"
fi
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
SlurmdPidFile=$work/slurmd-%n.pid
SlurmctldPort=16817
SlurmdPort=16818
StateSaveLocation=$work/spool/ctld
SlurmdSpoolDir=$work/spool/d-%n
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd-%n.log
ReturnToService=2
$node_lines
PartitionName=debug Nodes=$(IFS=,; echo "${node_names[*]}") Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
# Slurm 22.05 reads cgroup.conf even when no cgroup plugin is used.
printf "CgroupPlugin=cgroup/v1\nCgroupAutomount=no\nCgroupMountpoint=/sys/fs/cgroup\n" > "$work/cgroup.conf"

slurmctld -f "$SLURM_CONF" -i
for n in "${node_names[@]}"; do
  mkdir -p "$work/spool/d-$n"
  if [ "$nodes" = 2 ]; then slurmd -f "$SLURM_CONF" -N "$n"; else slurmd -f "$SLURM_CONF"; fi
done
# Poll until every node is up (a condition, bounded at 2 minutes for a loaded machine).
nodes_up() { [ "$(sinfo -h -N -o '%t' 2>/dev/null | grep -cE '^(idle|mix|alloc)')" -ge "$nodes" ]; }
for i in $(seq 1 1200); do
  if nodes_up; then break; fi
  sleep 0.1
done
sinfo || true
if ! nodes_up; then
  echo "[slurm] node did not come up"; tail -20 "$work/log/slurmctld.log" "$work"/log/slurmd-*.log; exit 1
fi

