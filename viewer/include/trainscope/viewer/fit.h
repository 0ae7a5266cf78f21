// trainscope/viewer/fit.h — text and labels that fit where they are drawn: a label cut with "..."
// to a width (the full text then goes in a tooltip), a ruler label kept inside the ruler, a table
// column as wide as its widest cell, axis labels that never overprint one another, and a plot's
// memory axis that spans the data rather than a limit far above it. Pure arithmetic over widths the
// caller measures (ImGui::CalcTextSize in the app, a fixed character width in tests); no drawing.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace trainscope::viewer {

// The width of a text in pixels, as the caller's font measures it.
using TextWidth = std::function<float(const std::string&)>;

// `s` when it fits in `max_w`; else its longest prefix (whole UTF-8 characters) followed by "..."
// that fits; "" when not even "..." fits. cut (optional) says whether it was cut.
std::string ellipsize(const std::string& s, float max_w, const TextWidth& width, bool* cut = nullptr);

// Where a tick's label starts: `pad` right of the tick, unless it would pass x1 — then it ends `pad`
// left of the tick (right-aligned to it), never left of x0. The last ruler label is then whole.
float tickLabelX(float tick_x, float label_w, float x0, float x1, float pad = 3);

// Every major tick's label placed so that none is cut or overprinted: each right of its tick when it
// fits before x1, else left of it (tickLabelX), and left out (-1) when that meets the label before
// it. Returns each label's x0; xs and widths are the ticks' x and their labels' widths, left to right.
std::vector<float> placeTickLabels(const std::vector<float>& xs, const std::vector<float>& widths, float x0, float x1,
                                   float pad = 3);

// A fixed column's width: its header's and widest cell's, plus `pad` (ImGui's cell padding both sides).
float columnWidth(const std::string& header, const std::vector<std::string>& cells, const TextWidth& width,
                  float pad = 10);

// Labels that must not overprint: boxes in the order of their importance. A box is kept when it
// meets no box kept before it; when it does, the alternatives (the same label placed elsewhere, in
// the order given) are tried. Returns, per label, the index of the placement used (0: the first box,
// k: alternative k) or -1: left out (its text is on hover instead).
struct LabelBox {
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  bool meets(const LabelBox& o) const { return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1; }
};
std::vector<int> placeLabels(const std::vector<std::vector<LabelBox>>& placements);

// A histogram's x axis over its bin edges (log-spaced durations): a tick at every `every`-th edge
// (and the last), each labelled by `format`, centred on its tick but kept inside [0, w], and left out
// where it would meet a label already placed (the first and last edges come first). x is the tick's
// position, label_x0 where its text starts, both from the plot's left edge.
struct AxisLabel {
  float x = 0, label_x0 = 0, label_w = 0;
  std::string text;
};
std::vector<AxisLabel> histogramAxis(const std::vector<double>& edges, float w, const TextWidth& width,
                                     const std::function<std::string(double)>& format, size_t every = 8);

// A memory axis's top: the data's largest value with 10% headroom, and the limit on it only when it
// is near the data (no more than `near` times the data's top). A 4 GiB limit over trials that peaked
// at 1.4 MiB leaves the limit off the axis (limit_shown false: say it in words instead).
struct MemoryAxis {
  double hi = 1;
  bool limit_shown = false;
};
MemoryAxis memoryAxis(double data_max, double limit, double near = 4);

}  // namespace trainscope::viewer
