// test_main.cpp — GoogleTest entry; fixes LibTorch's thread count so results are reproducible.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <ftw.h>
#include <unistd.h>

#include <cstdio>

#include "test_util.h"

namespace trainscope::testing {
std::string tempPath(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("trainscope-tests-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}
}  // namespace trainscope::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  at::set_num_threads(2);
  int rc = RUN_ALL_TESTS();
  // Not std::filesystem::remove_all: libtorch.so exports its own copy of that symbol, which
  // crashes when called from this binary (seen with torch 2.11's wheel). nftw does the same job.
  const std::string dir = std::filesystem::temp_directory_path() / ("trainscope-tests-" + std::to_string(getpid()));
  nftw(dir.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
       FTW_DEPTH | FTW_PHYS);
  return rc;
}
