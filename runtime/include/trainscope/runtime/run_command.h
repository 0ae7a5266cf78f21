// trainscope/runtime/run_command.h — `trainscope run`: train, print, record.
#pragma once

#include <iosfwd>

#include "trainscope/runtime/config.h"

namespace trainscope::runtime {

// Resolves `cfg`, trains cfg.steps steps, prints a line per step (unless quiet) and, with --json,
// one summary line; writes the run database when cfg.out is set. Returns the process exit status.
// Throws UserError for bad input (the caller prints it and exits 2).
int runCommand(TrainConfig cfg, std::ostream& out, std::ostream& err);

// Whether this process is one rank of a launched job (torchrun's or Slurm's variables are set).
bool isRankProcess();
// Checks everything a rank would check first (flags, workload, data file), so that bad input is
// reported once by the launcher rather than by every rank. Throws UserError.
void validateBeforeLaunch(TrainConfig cfg);

}  // namespace trainscope::runtime
