// flags_of.h — a command line's flags as a map, for tests of the exports (tests/core/*export_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>

namespace trainscope::testing {

// --flag [value] ... -> flag -> value ("" for a switch); a repeated flag fails the test.
inline std::map<std::string, std::string> flagsOf(const std::string& text) {
  std::map<std::string, std::string> flags;
  std::stringstream ss(text);
  std::string tok, last;
  while (ss >> tok) {
    if (tok.rfind("--", 0) == 0) {
      EXPECT_FALSE(flags.count(tok)) << "repeated flag " << tok;
      flags[tok] = "";
      last = tok;
    } else {
      flags[last] = tok;
    }
  }
  return flags;
}

}  // namespace trainscope::testing
