#!/usr/bin/env bash
# slurm_test.sh TRAINSCOPE_BIN — Slurm for real, on this one machine:
#   installs slurm-wlm and munge if missing (apt-get, idempotent), starts munged, slurmctld and slurmd
#   on localhost with a one-node configuration in a private directory (SLURM_CONF, nothing in /etc),
#   runs `trainscope run --launcher slurm --nproc 2` (2 ranks through srun), checks its per-step
#   losses against a single-rank run, then runs a small `trainscope tune --launcher slurm` (every
#   trial a Slurm job step) and checks its study, and stops the daemons whatever happens.
set -euo pipefail
bin=$1
work=$(mktemp -d /tmp/trainscope-slurm-XXXXXX)
host=$(hostname -s)
export SLURM_CONF=$work/slurm.conf

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  echo "[slurm] installing slurm-wlm and munge"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi

cleanup() {
  set +e
  [ -f "$work/slurmd.pid" ] && kill "$(cat "$work/slurmd.pid")" 2>/dev/null
  [ -f "$work/slurmctld.pid" ] && kill "$(cat "$work/slurmctld.pid")" 2>/dev/null
  [ -f "$work/munged.pid" ] && kill "$(cat "$work/munged.pid")" 2>/dev/null
  sleep 1
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
for i in $(seq 1 60); do
  if sinfo -h -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then break; fi
  sleep 0.5
done
sinfo || true
if ! sinfo -h -o '%t' | grep -qE '^(idle|mix|alloc)'; then
  echo "[slurm] node did not come up"; tail -20 "$work/log/slurmctld.log" "$work/log/slurmd.log"; exit 1
fi

common=(run --workload tiny --seq 32 --mbs 2 --gbs 8 --steps 4 --device cpu --clip 0 --min-lr-ratio 1 --lr 3e-3 -q)
"$bin" "${common[@]}" --out "$work/single.db"
timeout 300 "$bin" "${common[@]}" --launcher slurm --nproc 2 --out "$work/slurm.db"

python3 - "$work/single.db" "$work/slurm.db" <<'PY'
import sqlite3, sys
a = dict(sqlite3.connect(sys.argv[1]).execute("SELECT step, loss FROM steps WHERE rank=0").fetchall())
b = dict(sqlite3.connect(sys.argv[2]).execute("SELECT step, loss FROM steps WHERE rank=0").fetchall())
meta = dict(sqlite3.connect(sys.argv[2]).execute("SELECT key, value FROM meta").fetchall())
assert meta["world_size"] == "2", meta
assert '"launcher":"slurm"' in meta["config"], meta["config"]
assert a.keys() == b.keys() and len(a) == 4, (a, b)
for k in a:
    assert abs(a[k] - b[k]) / a[k] <= 1e-5, (k, a[k], b[k])
print("[slurm] 2 ranks under srun match the single-rank losses:", [round(b[k], 6) for k in sorted(b)])
PY

# The tuner with every trial a job step: a small space of 1-2 ranks, a few trials.
timeout 600 "$bin" tune --workload tiny --seq 32 --gbs 8 --mbs 2,4 --ckpt none --no-zero --no-sequence-parallel \
  --pp-schedules 1f1b --launcher slurm --first-round 3 --max-trials 4 --trial-steps 3 --study "$work/study.db" \
  > "$work/tune.log" 2>&1 || { cat "$work/tune.log"; exit 1; }
tail -5 "$work/tune.log"
python3 - "$work/study.db" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
study = dict(db.execute("SELECT key, value FROM study").fetchall())
assert json.loads(study["inputs"])["launcher"] == "slurm", study["inputs"]
trials = db.execute("SELECT candidate, status, step_s, db_path FROM trials").fetchall()
ok = [t for t in trials if t[1] == "ok"]
assert len(ok) >= 3 and all(t[2] > 0 for t in ok), trials
for cand, status, step_s, path in ok:
    config = dict(sqlite3.connect(path).execute("SELECT key, value FROM meta").fetchall())["config"]
    assert '"launcher":"slurm"' in config, config
assert "recommended" in study, study
print("[slurm] tune --launcher slurm:", len(ok), "trials ok as job steps; recommended candidate", study["recommended"])
PY
