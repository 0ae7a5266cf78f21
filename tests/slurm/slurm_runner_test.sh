#!/usr/bin/env bash
# slurm_runner_test.sh TRAINSCOPE PYTHON WORKDIR [CASE] — `tune --runner hf --launcher slurm` under a real
# local Slurm (local_slurm.sh): tests/runner/ext_runner_test.py's CASE (slurm: every trial one srun step;
# slurm_hang: a hung trial's step cancelled).
# Exit 77 (skipped) where Slurm cannot be installed, or the venv has no accelerate.
set -euo pipefail
bin=$1 py=$2 out=$3 case=${4:-slurm}
SLURM_INSTALL_FAILS_WITH=77
source "$(dirname "$0")/local_slurm.sh"
"$py" "$(dirname "$0")/../runner/ext_runner_test.py" "$bin" "$case" "$out"
