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

}  // namespace trainscope::testing
