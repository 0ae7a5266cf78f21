// trainscope/viewer/image.h — RGBA images: PNG out (screenshots) and back in (tests check pixels),
// and the fixed palette the timeline draws with (packed as 0xAABBGGRR, as Dear ImGui's IM_COL32).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/common/files.h"
#include "trainscope/viewer/model.h"

namespace trainscope::viewer {

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgba;  // rows top to bottom
  uint32_t pixel(int x, int y) const;  // 0xAABBGGRR
};

// The rule of --screenshot (files::OutputRule): never one of `inputs`; an existing file is replaced
// when it is a PNG (by its signature: an earlier screenshot), anything else only with `overwrite`.
files::OutputRule screenshotRule(std::vector<std::string> inputs = {}, bool overwrite = false);
// Writes through files::AtomicFile (a random temporary name, then rename): a failed write leaves no
// partial PNG, and a link at `path` is replaced (only with --overwrite), never followed.
void writePng(const std::string& path, const Image& img, const files::OutputRule& rule = screenshotRule());
Image readPng(const std::string& path);  // 8-bit RGBA or RGB, non-interlaced (what writePng writes)

constexpr uint32_t rgb(uint8_t r, uint8_t g, uint8_t b) { return 0xff000000u | uint32_t(b) << 16 | uint32_t(g) << 8 | r; }

namespace palette {
inline constexpr uint32_t kBackground = rgb(24, 26, 30);
inline constexpr uint32_t kRowAlt = rgb(30, 32, 37);
inline constexpr uint32_t kText = rgb(225, 228, 232);
// A block of folded events: a hue no event kind comes near (magenta-pink, 315 degrees; the kinds'
// hues, with their per-name shifts, stay at least 25 degrees away), drawn by how busy the block is.
inline constexpr uint32_t kFolded = rgb(217, 119, 192);
inline constexpr uint32_t kSelection = rgb(255, 255, 255);
inline constexpr uint32_t kRangeSelect = rgb(70, 110, 170);
inline constexpr uint32_t kFlow = rgb(255, 210, 60);
inline constexpr uint32_t kMemoryCounter = rgb(90, 200, 210);
// Ranks related: a collective's links to its copies on the other ranks, a pipeline send's arrow to
// its receive, and the hatching over the part of a collective spent waiting for the last rank.
inline constexpr uint32_t kCommLink = rgb(80, 240, 200);
inline constexpr uint32_t kP2p = rgb(255, 140, 40);
inline constexpr uint32_t kWaitHatch = rgb(110, 25, 25);
}  // namespace palette

// The colour of an event kind: kernels blue, NCCL kernels and collectives red, copies yellow, sets
// orange, ranges green, ops purple, API calls grey, steps teal.
uint32_t kindColor(EventKind k);
// The colour an event is drawn in: its kind's, shifted by a stable hash of its name (FNV-1a of the
// text, so the same name has the same colour in every file) — hue by up to kNameHueShift degrees,
// brightness by up to 12% — so that neighbours of one kind with different names stand apart while
// the kind stays recognisable. Grey API calls vary in brightness only.
uint32_t nameColor(EventKind k, const std::string& name);
inline constexpr double kNameHueShift = 8;
// Hue (degrees, 0..360), saturation and value (0..1) of a packed colour.
struct Hsv {
  double h, s, v;
};
Hsv toHsv(uint32_t c);

}  // namespace trainscope::viewer
