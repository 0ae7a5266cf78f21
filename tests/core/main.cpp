// main.cpp — GoogleTest entry of trainscope_core_tests: the run database, the tracer, workloads and
// run configs. No LibTorch in this binary (it links rundb, tracer, workloads and runconfig only).
#include <gtest/gtest.h>

#include "../common/cli.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  trainscope::testing::removeTempFolder();
  return rc;
}
