// ruler_label.h — a ruler label of the viewer back to nanoseconds, exactly: "+0.2 us", "345.125 ms",
// "100.345 120 100 s" (digits grouped by spaces). Throws on anything else. Shared by the viewer's
// model and app tests, which read labels off the ruler and off --layout.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace trainscope::testing {

inline int64_t parseRulerLabel(std::string s) {
  bool neg = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) neg = s[0] == '-', s.erase(0, 1);
  const size_t unit_at = s.find_last_of(' ');
  const std::string unit = s.substr(unit_at + 1);
  std::string num;
  for (char c : s.substr(0, unit_at))
    if (c != ' ') num += c;
  const int e = unit == "ns" ? 0 : unit == "us" ? 3 : unit == "ms" ? 6 : unit == "s" ? 9 : -1;
  if (e < 0 || num.empty()) throw std::runtime_error("not a label: " + s);
  const size_t dot = num.find('.');
  const std::string ip = num.substr(0, dot), fp = dot == std::string::npos ? "" : num.substr(dot + 1);
  if (int(fp.size()) > e) throw std::runtime_error("more decimals than the unit has: " + s);
  int64_t scale = 1;
  for (int i = 0; i < e; ++i) scale *= 10;
  int64_t frac_scale = scale;
  for (size_t i = 0; i < fp.size(); ++i) frac_scale /= 10;
  const int64_t v = std::stoll(ip) * scale + (fp.empty() ? 0 : std::stoll(fp) * frac_scale);
  return neg ? -v : v;
}

}  // namespace trainscope::testing
