// cli.h — what every test binary shares: temporary paths, running the command line, one-value SQL
// probes for tests that check the file format itself.
#pragma once

#include <cstdint>
#include <string>

namespace trainscope::testing {

// A path in this test process's own temporary folder (removed when the binary exits).
std::string tempPath(const std::string& name);
// Removes the temporary folder (called by each test binary's main).
void removeTempFolder();

struct CliResult {
  int status = -1;      // exit status; 128 + signal when killed
  std::string output;   // stdout and stderr together
  double seconds = 0;
};
// Runs a shell command line, stdout and stderr captured together.
CliResult sh(const std::string& command);
// Runs `trainscope ARGS` (the front end built with these tests).
CliResult cli(const std::string& args);
// A real PP 2 run of the tiny workload (seq 16, micro-batch 1, 3 steps, one CPU lane a rank) traced
// at the ranges level into TRACE, stage 1 slowed 200 ms at each step's start by the test knob
// (TRAINSCOPE_TEST_SLOW_RANK), so that stage 0 waits at its receives at any load.
CliResult slowStagePipelineRun(const std::string& trace, int global_batch);

}  // namespace trainscope::testing
