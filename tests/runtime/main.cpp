// main.cpp — GoogleTest entry of trainscope_runtime_tests; fixes LibTorch's thread count so results
// are reproducible.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "../common/cli.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  at::set_num_threads(2);
  const int rc = RUN_ALL_TESTS();
  trainscope::testing::removeTempFolder();
  return rc;
}
