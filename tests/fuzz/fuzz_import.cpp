// fuzz_import.cpp — libFuzzer target: any bytes as a trace file for `trainscope import`
// (importTraces). Run with scripts/fuzz import SECONDS; seeds in corpus/import/.
#include "one_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  trainscope::fuzz::importOneInput(data, size);
  return 0;
}
