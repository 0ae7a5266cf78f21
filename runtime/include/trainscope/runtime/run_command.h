// trainscope/runtime/run_command.h — `trainscope run`: train, print, record.
#pragma once

#include <iosfwd>

#include "trainscope/runtime/config.h"

namespace trainscope::runtime {

// Resolves `cfg`, trains cfg.steps steps, prints a line per step (unless quiet) and, with --json,
// one summary line; writes the run database when cfg.out is set. Returns the process exit status.
// Throws UserError for bad input (the caller prints it and exits 2).
int runCommand(TrainConfig cfg, std::ostream& out, std::ostream& err);

}  // namespace trainscope::runtime
