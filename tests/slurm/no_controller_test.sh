#!/usr/bin/env bash
# no_controller_test.sh TRAINSCOPE_BIN WORKDIR — `--launcher slurm` where srun exists but no Slurm
# controller answers (common/slurm_ping.h): fake srun, scontrol and sinfo first in PATH, written
# here, say what Slurm 22.05's say then ("Slurmctld(primary) at ... is DOWN", exit status 1). tune and
# run must refuse with exit 2 naming --launcher slurm and the fix, before any trial or rank: no study,
# no trial folder, no srun started. Then a controller that answers (scontrol ping "UP") lets run go
# on to srun; and with no scontrol in PATH at all the refusal says so.
set -euo pipefail
bin=$1 work=$2
rm -rf "$work"
mkdir -p "$work/fake"
fake=$work/fake
cat > "$fake/scontrol" <<SH
#!/bin/sh
if [ -f "$work/controller-up" ]; then echo "Slurmctld(primary) at fakehost is UP"; exit 0; fi
echo "Slurmctld(primary) at fakehost is DOWN"
echo "*****************************************"
echo "** RESTORE SLURMCTLD DAEMON TO SERVICE **"
echo "*****************************************"
exit 1
SH
cat > "$fake/srun" <<SH
#!/bin/sh
touch "$work/srun-ran"
echo "srun: error: Unable to allocate resources: Unable to contact slurm controller (connect failure)" >&2
exit 1
SH
cat > "$fake/sinfo" <<SH
#!/bin/sh
echo "slurm_load_partitions: Unable to contact slurm controller (connect failure)" >&2
exit 1
SH
chmod +x "$fake/scontrol" "$fake/srun" "$fake/sinfo"

expect_refusal() {  # expect_refusal WHAT REGEX -- COMMAND...
  local what=$1 regex=$2; shift 3
  set +e
  err=$(timeout 120 "$@" 2>&1 >/dev/null)
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || { echo "FAIL $what: exit $rc, not 2: $err"; exit 1; }
  grep -qE -- "$regex" <<<"$err" || { echo "FAIL $what: stderr does not match /$regex/: $err"; exit 1; }
  echo "ok $what: $err"
}

tune=(tune --workload tiny --seq 32 --gbs 8 --mbs 2 --launcher slurm --max-trials 2 --study "$work/study.db")
down="--launcher slurm: no Slurm controller answers \(scontrol ping: Slurmctld\(primary\) at fakehost is DOWN \(exit status 1\)\) \(fix: start slurmctld, or use --launcher local\)"
expect_refusal "tune, controller down" "$down" -- env PATH="$fake:$PATH" "$bin" "${tune[@]}"
for p in "$work/study.db" "$work/study.db.trials" "$work/srun-ran"; do
  [ ! -e "$p" ] || { echo "FAIL: the refused tune left $p"; ls -la "$work"; exit 1; }
done
expect_refusal "tune --runner hf, controller down" "$down" -- \
  env PATH="$fake:$PATH" "$bin" "${tune[@]}" --runner hf --entry "$0"
[ ! -e "$work/study.db" ] && [ ! -e "$work/srun-ran" ] || { echo "FAIL: the refused hf tune left files"; exit 1; }

run=(run --workload tiny --seq 32 --mbs 2 --gbs 4 --steps 1 --device cpu --launcher slurm --nproc 2 -q --out "$work/run.db")
expect_refusal "run, controller down" "$down" -- env PATH="$fake:$PATH" "$bin" "${run[@]}"
[ ! -e "$work/run.db" ] && [ ! -e "$work/srun-ran" ] || { echo "FAIL: the refused run left files"; exit 1; }

# No scontrol anywhere in PATH (srun alone): the fix says to run inside a Slurm installation.
mkdir -p "$work/only-srun"
cp "$fake/srun" "$work/only-srun/srun"
expect_refusal "tune, no scontrol" \
  "--launcher slurm: no Slurm controller answers \(scontrol ping: scontrol is not found in PATH\) \(fix: run inside a Slurm installation" \
  -- env PATH="$work/only-srun" "$bin" "${tune[@]}"

# A controller that answers: run passes the check and reaches srun (the fake one, which fails).
touch "$work/controller-up"
set +e
err=$(timeout 120 env PATH="$fake:$PATH" "$bin" "${run[@]}" 2>&1 >/dev/null)
rc=$?
set -e
[ -e "$work/srun-ran" ] || { echo "FAIL: with the controller up, run did not start srun (exit $rc): $err"; exit 1; }
grep -q "srun failed (exit status 1)" <<<"$err" || { echo "FAIL: srun's failure not reported: $err"; exit 1; }
echo "ok run, controller up: reached srun (exit $rc)"
