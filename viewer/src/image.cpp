// image.cpp — PNG encode/decode on zlib (RFC 2083), and the kind palette.
#include "trainscope/viewer/image.h"

#include <zlib.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"

namespace trainscope::viewer {

uint32_t Image::pixel(int x, int y) const {
  if (x < 0 || y < 0 || x >= width || y >= height) return 0;
  const uint8_t* p = &rgba[(size_t(y) * size_t(width) + size_t(x)) * 4];
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

uint32_t kindColor(EventKind k) {
  switch (k) {
    case EventKind::Step: return rgb(60, 150, 150);
    case EventKind::Range: return rgb(70, 160, 90);
    case EventKind::HostOp: return rgb(140, 100, 190);
    case EventKind::ApiCall: return rgb(130, 130, 130);
    case EventKind::Kernel: return rgb(60, 120, 220);
    case EventKind::CommKernel: return rgb(210, 70, 70);
    case EventKind::Memcpy: return rgb(220, 190, 50);
    case EventKind::Memset: return rgb(230, 130, 40);
    case EventKind::Collective: return rgb(210, 70, 70);
  }
  return rgb(255, 0, 255);
}

Hsv toHsv(uint32_t c) {
  const double r = (c & 0xff) / 255.0, g = ((c >> 8) & 0xff) / 255.0, b = ((c >> 16) & 0xff) / 255.0;
  const double mx = std::max({r, g, b}), mn = std::min({r, g, b}), d = mx - mn;
  double h = 0;
  if (d > 0) {
    if (mx == r) h = 60 * std::fmod((g - b) / d, 6.0);
    else if (mx == g) h = 60 * ((b - r) / d + 2);
    else h = 60 * ((r - g) / d + 4);
  }
  if (h < 0) h += 360;
  return {h, mx > 0 ? d / mx : 0, mx};
}

namespace {

uint32_t fromHsv(double h, double s, double v) {
  h = std::fmod(h + 360.0, 360.0);
  const double c = v * s, x = c * (1 - std::fabs(std::fmod(h / 60, 2.0) - 1)), m = v - c;
  double r = 0, g = 0, b = 0;
  if (h < 60) r = c, g = x;
  else if (h < 120) r = x, g = c;
  else if (h < 180) g = c, b = x;
  else if (h < 240) g = x, b = c;
  else if (h < 300) r = x, b = c;
  else r = c, b = x;
  auto ch = [&](double u) { return uint8_t(std::lround(std::clamp((u + m) * 255.0, 0.0, 255.0))); };
  return rgb(ch(r), ch(g), ch(b));
}

}  // namespace

uint32_t nameColor(EventKind k, const std::string& name) {
  uint32_t hash = 2166136261u;  // FNV-1a
  for (unsigned char c : name) hash = (hash ^ c) * 16777619u;
  const Hsv base = toHsv(kindColor(k));
  const double u1 = double(hash & 0xffff) / 65535.0, u2 = double(hash >> 16) / 65535.0;  // 0..1 each
  const double h = base.s > 0 ? base.h + (2 * u1 - 1) * kNameHueShift : base.h;
  const double v = std::clamp(base.v * (0.88 + 0.24 * u2), 0.0, 1.0);
  return fromHsv(h, base.s, v);
}

namespace {

void put32(std::string& s, uint32_t v) {
  for (int i = 3; i >= 0; --i) s.push_back(char((v >> (8 * i)) & 0xff));
}
uint32_t get32(const unsigned char* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

void chunk(std::string& out, const char* type, const std::string& data) {
  put32(out, uint32_t(data.size()));
  std::string body = std::string(type, 4) + data;
  out += body;
  put32(out, uint32_t(crc32(0, reinterpret_cast<const Bytef*>(body.data()), uInt(body.size()))));
}

}  // namespace

files::OutputRule screenshotRule(std::vector<std::string> inputs, bool overwrite) {
  files::OutputRule rule;
  rule.field = "--screenshot";
  rule.inputs = std::move(inputs);
  rule.overwrite = overwrite;
  rule.earlier = files::startsWith("\x89PNG\r\n\x1a\n");
  rule.kind = "PNG image";
  return rule;
}

void writePng(const std::string& path, const Image& img, const files::OutputRule& rule) {
  std::string raw;
  raw.reserve(size_t(img.height) * (size_t(img.width) * 4 + 1));
  for (int y = 0; y < img.height; ++y) {
    raw.push_back('\0');  // filter: none
    raw.append(reinterpret_cast<const char*>(&img.rgba[size_t(y) * size_t(img.width) * 4]), size_t(img.width) * 4);
  }
  uLongf zlen = compressBound(uLong(raw.size()));
  std::string z(zlen, '\0');
  if (compress2(reinterpret_cast<Bytef*>(z.data()), &zlen, reinterpret_cast<const Bytef*>(raw.data()), uLong(raw.size()),
                6) != Z_OK)
    throw UserError("--screenshot", "could not compress the image", "");
  z.resize(zlen);
  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  put32(ihdr, uint32_t(img.width));
  put32(ihdr, uint32_t(img.height));
  ihdr += std::string("\x08\x06\x00\x00\x00", 5);  // 8-bit RGBA, deflate, no filter method, no interlace
  chunk(png, "IHDR", ihdr);
  chunk(png, "IDAT", z);
  chunk(png, "IEND", "");
  // A random temporary name beside `path`, then rename: no guessable name to plant a link at, and a
  // link planted at `path` is replaced, never followed.
  files::writeAtomically(path, png, rule);
}

Image readPng(const std::string& path) {
  const int fd = files::openRegularFile(path, "png", "name a PNG file");
  std::string s;
  char buf[1 << 16];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    s.append(buf, size_t(n));
  }
  ::close(fd);
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  auto bad = [&](const std::string& why) { return UserError("png", path + ": " + why, ""); };
  if (s.size() < 8 || std::memcmp(p, "\x89PNG\r\n\x1a\n", 8) != 0) throw bad("not a PNG");
  Image img;
  int channels = 0;
  std::string idat;
  for (size_t off = 8; off + 12 <= s.size();) {
    const uint32_t len = get32(p + off);
    if (off + 12 + len > s.size()) throw bad("truncated");
    const std::string type = s.substr(off + 4, 4);
    const unsigned char* d = p + off + 8;
    if (type == "IHDR") {
      img.width = int(get32(d));
      img.height = int(get32(d + 4));
      if (d[8] != 8 || (d[9] != 6 && d[9] != 2) || d[12] != 0) throw bad("only 8-bit RGB(A), non-interlaced");
      channels = d[9] == 6 ? 4 : 3;
    } else if (type == "IDAT") {
      idat.append(reinterpret_cast<const char*>(d), len);
    }
    off += 12 + len;
  }
  if (!channels || img.width <= 0 || img.height <= 0) throw bad("no image header");
  const size_t stride = size_t(img.width) * size_t(channels);
  std::string raw(size_t(img.height) * (stride + 1), '\0');
  uLongf rlen = uLongf(raw.size());
  if (uncompress(reinterpret_cast<Bytef*>(raw.data()), &rlen, reinterpret_cast<const Bytef*>(idat.data()),
                 uLong(idat.size())) != Z_OK || rlen != raw.size())
    throw bad("bad image data");
  std::vector<uint8_t> cur(stride), prev(stride, 0);
  img.rgba.resize(size_t(img.width) * size_t(img.height) * 4);
  for (int y = 0; y < img.height; ++y) {
    const auto* row = reinterpret_cast<const uint8_t*>(&raw[size_t(y) * (stride + 1)]);
    const int filter = row[0];
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= size_t(channels) ? cur[i - size_t(channels)] : 0, b = prev[i],
                c = i >= size_t(channels) ? prev[i - size_t(channels)] : 0;
      int v = row[1 + i];
      switch (filter) {
        case 0: break;
        case 1: v += a; break;
        case 2: v += b; break;
        case 3: v += (a + b) / 2; break;
        case 4: {
          const int pp = a + b - c, pa = std::abs(pp - a), pb = std::abs(pp - b), pc = std::abs(pp - c);
          v += (pa <= pb && pa <= pc) ? a : pb <= pc ? b : c;
          break;
        }
        default: throw bad("bad filter");
      }
      cur[i] = uint8_t(v);
    }
    for (int x = 0; x < img.width; ++x)
      for (int k = 0; k < 4; ++k)
        img.rgba[(size_t(y) * size_t(img.width) + size_t(x)) * 4 + size_t(k)] =
            k < channels ? cur[size_t(x) * size_t(channels) + size_t(k)] : 255;
    prev.swap(cur);
  }
  return img;
}

}  // namespace trainscope::viewer
