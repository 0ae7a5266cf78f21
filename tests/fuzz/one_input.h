// one_input.h — one fuzz input through the code under test. Shared by the libFuzzer targets
// (fuzz_import.cpp, fuzz_reader.cpp; scripts/fuzz) and the regression test in trainscope_core_tests
// (core/fuzz_regression_test.cpp), so a crasher kept under tests/fuzz/regressions/ replays exactly.
//
// An input may be accepted or rejected. Anything else is a finding: a crash, a sanitizer report, or
// an exception of another type escaping these functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trainscope::fuzz {

enum class Outcome { Accepted, Rejected };

// The bytes as one trace file (Kineto JSON, plain or gzipped, or anything else importTraces
// recognises), imported into a scratch run database that each call overwrites.
// Rejected: a UserError, which importTraces promises for every malformed input.
Outcome importOneInput(const uint8_t* data, size_t size);

// The bytes as a run database, opened with RunReader and read through every query it offers, then
// summarised (summarize, summaryJson). Rejected: a UserError, or a SqliteError for damage that only
// a later query runs into (the command line reports both as bad input, exit status 2).
Outcome readOneInput(const uint8_t* data, size_t size);

}  // namespace trainscope::fuzz
