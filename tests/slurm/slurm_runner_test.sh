#!/usr/bin/env bash
# slurm_runner_test.sh TRAINSCOPE PYTHON WORKDIR [CASE] — `tune --runner hf --launcher slurm` under a real
# local Slurm (local_slurm.sh): tests/runner/ext_runner_test.py's CASE (slurm: every trial one srun step;
# slurm_hang: a hung trial's step cancelled), or tests/runner/slurm_resume_test.py's (slurm_kill9: a
# tuner killed with -9 resumed; slurm_alloc: the tuner inside an allocation; slurm_two_nodes: a trial
# on two nodes of this host).
# Exit 77 (skipped) where Slurm cannot be installed, or the venv has no accelerate.
set -euo pipefail
bin=$1 py=$2 out=$3 case=${4:-slurm}
SLURM_INSTALL_FAILS_WITH=77
script=ext_runner_test.py
case $case in slurm_kill9|slurm_alloc|slurm_two_nodes) script=slurm_resume_test.py ;; esac
[ "$case" = slurm_two_nodes ] && SLURM_TEST_NODES=2
source "$(dirname "$0")/local_slurm.sh"
"$py" "$(dirname "$0")/../runner/$script" "$bin" "$case" "$out"
