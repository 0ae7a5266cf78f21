// trainscope/viewer/ruler.h — the time ruler and exact time labels: what the ruler's ticks say at any
// zoom, and how tooltips and Details print a time. Pure functions of integers; no drawing here.
//
// Every label is exact at the precision it shows: tick times are integer nanoseconds (multiples of
// the tick step), and labels are printed from those integers, never through a rounded double. When
// an absolute label would need more than kRulerDigits digits (a 1 us window 100 s into a trace),
// the ruler switches to offsets, as Perfetto and Tracy do: the first labelled tick in view is the
// base, shown once in full to the nanosecond ("100.345 120 100 s"), and every labelled tick reads as
// an offset from it ("+0.0 us", "+0.2 us", …), so each label stays short and unique.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainscope::viewer {

struct TimeView;

inline constexpr int kRulerDigits = 6;  // the most digits an absolute tick label may take

struct Tick {
  int64_t ns = 0;     // exact, relative to the view's origin (the trace start)
  double t = 0;       // the same, as the double the view draws with
  std::string label;  // on major ticks only
  bool major = false;
};

struct Ruler {
  std::vector<Tick> ticks;
  int64_t step = 0;         // ns between major ticks: 1, 2 or 5 x 10^k, at least 10
  bool relative = false;    // labels are offsets from `base`
  int64_t base = 0;         // relative mode: the tick the offsets count from (ns from the origin)
  std::string base_label;   // relative mode: `base` to the nanosecond, e.g. "100.345 120 100 s"
};

// The ruler for the view: major ticks at least `min_px` apart, four minor ticks between majors, and
// labels unique and exact (see above). Absolute labels share one unit and one number of decimals.
Ruler makeRuler(const TimeView& v, float min_px = 80);

// A time or duration written exactly, in the unit of its magnitude (ns, us, ms, s), digits after
// the point grouped by three and trailing zero groups dropped: "830 ns", "1.5 us", "1.254 321 ms",
// "100.345 120 123 s".
std::string formatExact(int64_t ns);
// Exactly `decimals` digits after the point in unit 10^unit_exp ns (0: ns, 3: us, 6: ms, 9: s);
// ns must be a multiple of the last digit shown. group: separate digits after the point by three.
std::string formatFixed(int64_t ns, int unit_exp, int decimals, bool group = false);
// The unit for a magnitude: 0, 3, 6 or 9 (ns, us, ms, s).
int unitExponent(int64_t ns);

}  // namespace trainscope::viewer
