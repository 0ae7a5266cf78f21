// workload_files.h — workload files the tests share, written once per test binary into its
// temporary folder (cli.h's tempPath).
#pragma once

#include <fstream>
#include <string>

#include "cli.h"

namespace trainscope::testing {

// The tiny model's shape with 4 layers, so that pp 2 × 2 virtual stages gives every chunk one layer.
inline std::string tiny4Workload() {
  static const std::string path = [] {
    const std::string p = tempPath("tiny4.json");
    std::ofstream(p) << R"({"name":"tiny4","n_layer":4,"n_head":2,"n_embd":32,"n_positions":64,"vocab_size":128})";
    return p;
  }();
  return path;
}

}  // namespace trainscope::testing
