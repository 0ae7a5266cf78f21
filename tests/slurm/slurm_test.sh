#!/usr/bin/env bash
# slurm_test.sh TRAINSCOPE_BIN — Slurm for real, on this one machine:
#   installs slurm-wlm and munge if missing (apt-get, idempotent), starts munged, slurmctld and slurmd
#   on localhost with a one-node configuration in a private directory (SLURM_CONF, nothing in /etc),
#   runs `trainscope run --launcher slurm --nproc 2` (2 ranks through srun), checks its per-step
#   losses against a single-rank run, then runs a small `trainscope tune --launcher slurm` (every
#   trial a Slurm job step) and checks its study, and stops the daemons whatever happens.
set -euo pipefail
bin=$1
# munged, slurmctld and slurmd on localhost (SLURM_CONF, $work; stopped on exit): local_slurm.sh
source "$(dirname "$0")/local_slurm.sh"

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
