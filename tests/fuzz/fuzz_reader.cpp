// fuzz_reader.cpp — libFuzzer target: any bytes as a run database, read through RunReader, the
// run summary and the report. Run with scripts/fuzz reader SECONDS; seeds in corpus/reader/.
#include "one_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  trainscope::fuzz::readOneInput(data, size);
  return 0;
}
