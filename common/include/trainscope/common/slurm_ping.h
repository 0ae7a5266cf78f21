// trainscope/common/slurm_ping.h — whether a Slurm controller answers, asked before anything runs.
//
// With `srun` installed but no slurmctld answering (no slurm.conf, a controller that is down or
// unreachable), every srun fails with exit status 1 and only its own stderr says why: a tune would
// record every trial as failed. `--launcher slurm` (tune, run) asks first, the way Slurm's own tools
// do: `scontrol ping` (an argument vector, looked up in PATH, bounded), which reports each configured
// controller "UP" or "DOWN" (Slurm 22.05.8: exit status 1 when none answers; the words decide too, in
// case another version's status differs).
#pragma once

#include <string>

namespace trainscope::slurm {

struct Ping {
  bool ran = false;      // scontrol could be run (else it is not installed, or not in PATH)
  bool answers = false;  // a controller answered (one line "... is UP", none "DOWN" without one UP)
  std::string said;      // scontrol's words, for the error: "Slurmctld(primary) at vm is DOWN"
};

// Runs `scontrol ping`, its output and errors captured, killed past timeout_s (a controller behind a
// dropped route is given up on).
Ping pingController(double timeout_s = 30);

// Throws UserError naming `--launcher slurm` and the fix when no controller answers.
void requireController(double timeout_s = 30);

}  // namespace trainscope::slurm
