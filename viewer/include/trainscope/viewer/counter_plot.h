// trainscope/viewer/counter_plot.h — how a counter row is drawn as a plot: the values at its bottom
// and top (a ratio that moves between 1.20 and 1.42 is drawn from just below 1.20, not from 0), its
// colour (one per counter: memory, MoE imbalance and dropped tokens apart), what it says when it never
// moves from 0, and the value it holds at a time (for the cursor). No drawing here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "trainscope/viewer/model.h"

namespace trainscope::viewer {

struct CounterAxis {
  double lo = 0, hi = 0;    // the values at the row's bottom and top
  double min = 0, max = 0;  // the data's
  bool bytes = false;       // the memory counter: labels in bytes
  bool all_zero = false;    // every sample 0: the row says "0 throughout"
  bool empty = false;       // no samples
  // Where a value is drawn: 0 at the bottom, 1 at the top (clamped).
  double frac(double v) const { return hi > lo ? std::min(1.0, std::max(0.0, (v - lo) / (hi - lo))) : (v > 0 ? 1.0 : 0.0); }
};

// The axis of a counter row called `label` ("memory" for the memory counter, drawn from 0 in bytes).
// Any other counter whose values never go below half their max (a ratio like the MoE imbalance
// max/mean, a utilisation) is drawn from a baseline 10% of its range below its min; one that reaches
// 0 or below half its max from 0 (or from its min when that is negative).
CounterAxis counterAxis(const CounterSeries& c, const std::string& label);

// A value as the axis writes it: bytes for memory ("145 MiB"), else 4 significant digits ("1.42").
std::string counterText(const CounterAxis& a, double v);

// One colour per counter: memory teal, the MoE imbalance amber, dropped tokens red, any other a hue
// from its name (the same name the same colour in every file).
uint32_t counterColor(const std::string& label);

// The value the counter holds at t: its last sample at or before t; none before its first sample.
std::optional<double> counterValueAt(const CounterSeries& c, int64_t t);

}  // namespace trainscope::viewer
