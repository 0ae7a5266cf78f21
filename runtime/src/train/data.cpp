// data.cpp — synthetic and file token streams; see data.h for the sampling rule.
#include "trainscope/runtime/data.h"

#include <ATen/ATen.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"

namespace trainscope::runtime {
namespace {

constexpr int32_t kLlmcMagic = 20240520;
constexpr int kLlmcHeaderInts = 256;

std::vector<uint16_t> syntheticStream(int64_t vocab, int64_t seq, uint64_t seed) {
  // A Markov chain with a fixed random successor for every token: the next token is succ[prev]
  // with probability 7/8, else uniform. Learnable (its entropy floor is about
  // H(1/8) + ln(V)/8 nats), cheap to make, and identical for every run with the same seed.
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> token(0, vocab - 1);
  std::vector<uint16_t> succ(vocab);
  for (auto& t : succ) t = static_cast<uint16_t>(token(rng));
  const int64_t n = std::max<int64_t>(64 * (seq + 1), 1 << 16);
  std::vector<uint16_t> out(n);
  out[0] = static_cast<uint16_t>(token(rng));
  for (int64_t i = 1; i < n; ++i) out[i] = (rng() & 7) ? succ[out[i - 1]] : static_cast<uint16_t>(token(rng));
  return out;
}

std::vector<uint16_t> readTokenFile(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw UserError("--data", "token file " + path + " does not exist",
                    "pass an existing uint16 token file or --data synthetic");
  if (!fs::is_regular_file(path, ec))
    throw UserError("--data", path + " is not a regular file (a directory, device or FIFO)",
                    "pass a uint16 token file or --data synthetic");
  const auto bytes = static_cast<int64_t>(fs::file_size(path, ec));
  if (ec) throw UserError("--data", "cannot read the size of " + path + ": " + ec.message(), "check the path");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError("--data", "cannot open " + path, "check its permissions");
  int64_t offset = 0, count = 0;
  int32_t header[kLlmcHeaderInts] = {};
  if (bytes >= static_cast<int64_t>(sizeof(header))) {
    in.read(reinterpret_cast<char*>(header), sizeof(header));
  } else if (bytes >= static_cast<int64_t>(sizeof(int32_t))) {
    // Shorter than llm.c's header: raw tokens, unless it starts with llm.c's magic number, in which
    // case it is a header cut short (read as raw tokens it would be garbage).
    int32_t magic = 0;
    in.read(reinterpret_cast<char*>(&magic), sizeof(magic));
    if (magic == kLlmcMagic)
      throw UserError("--data", path + " is truncated: it starts with llm.c's magic number but holds " +
                                    std::to_string(bytes) + " bytes, less than the 1024-byte header",
                      "re-create the file; it was cut short");
  }
  if (bytes >= static_cast<int64_t>(sizeof(header)) && header[0] == kLlmcMagic) {
    if (header[1] != 1)
      throw UserError("--data", path + " has llm.c header version " + std::to_string(header[1]) + ", expected 1",
                      "re-export the tokens with llm.c's version-1 format");
    count = header[2];
    offset = sizeof(header);
    const int64_t have = (bytes - offset) / 2;
    if (count < 0 || have < count)
      throw UserError("--data", path + " is truncated: header says " + std::to_string(count) + " tokens, file holds " +
                                    std::to_string(have),
                      "re-create the file; it was cut short");
  } else if (bytes >= static_cast<int64_t>(sizeof(header)) && header[1] == 1 && header[2] > 0 &&
             int64_t(header[2]) == (bytes - int64_t(sizeof(header))) / 2) {
    // An llm.c layout (version 1, a token count that matches the file) under another magic number:
    // read as raw tokens, its header would become 512 tokens of garbage.
    throw UserError("--data", path + " has an llm.c header with magic " + std::to_string(header[0]) + ", expected " +
                                  std::to_string(kLlmcMagic),
                    "re-export the tokens with llm.c, or strip the 1024-byte header for the raw layout");
  } else {
    if (bytes % 2 != 0)
      throw UserError("--data", path + " is truncated: " + std::to_string(bytes) + " bytes is not a whole number of uint16 tokens",
                      "re-create the file; it was cut short");
    count = bytes / 2;
  }
  std::vector<uint16_t> tokens(count);
  in.clear();
  in.seekg(offset);
  in.read(reinterpret_cast<char*>(tokens.data()), count * 2);
  if (in.gcount() != count * 2) throw UserError("--data", "short read from " + path, "check the file");
  return tokens;
}

}  // namespace

TokenSource::TokenSource(const std::string& spec, int64_t vocab, int64_t seq, uint64_t seed) : seq_(seq) {
  if (vocab > 65536)
    throw UserError("workload.vocab_size", std::to_string(vocab) + " does not fit the uint16 token format",
                    "use a vocabulary of at most 65536 tokens");
  if (spec == "synthetic") {
    tokens_ = syntheticStream(vocab, seq, seed);
    description_ = "synthetic (seed " + std::to_string(seed) + ", " + std::to_string(tokens_.size()) + " tokens)";
  } else {
    tokens_ = readTokenFile(spec);
    description_ = spec + " (" + std::to_string(tokens_.size()) + " tokens)";
    uint16_t max_token = 0;
    for (uint16_t t : tokens_) max_token = std::max(max_token, t);
    if (!tokens_.empty() && max_token >= vocab)
      throw UserError("--data", spec + " holds token id " + std::to_string(max_token) + " >= vocab_size " +
                                    std::to_string(vocab),
                      "use a workload whose vocab_size covers the tokenizer");
  }
  if (static_cast<int64_t>(tokens_.size()) < seq + 1)
    throw UserError("--data", spec + " has " + std::to_string(tokens_.size()) + " tokens, fewer than one sequence of " +
                                  std::to_string(seq + 1),
                    "use a longer token file or a smaller --seq");
}

at::Tensor contextPositions(int64_t seq, int cp, int cp_rank, const at::Device& device) {
  const int64_t chunk = seq / (2 * cp);
  auto opts = at::TensorOptions().dtype(at::kLong);
  at::Tensor first = at::arange(cp_rank * chunk, (cp_rank + 1) * chunk, opts);                   // chunk i
  at::Tensor second = at::arange((2 * cp - 1 - cp_rank) * chunk, (2 * cp - cp_rank) * chunk, opts);  // 2·cp−1−i
  return at::cat({first, second}).to(device);                                                     // (T/cp)
}

Batch contextShard(const Batch& b, int cp, int cp_rank) {
  if (cp == 1) return b;
  at::Tensor pos = contextPositions(b.inputs.size(1), cp, cp_rank, b.inputs.device());
  return {b.inputs.index_select(1, pos), b.targets.index_select(1, pos)};  // (B, T/cp) each
}

Batch TokenSource::samples(int64_t first, int64_t count, const at::Device& device) const {
  const int64_t T = seq_;
  const int64_t span = static_cast<int64_t>(tokens_.size()) - T - 1;  // valid start positions: [0, span]
  at::Tensor buf = at::empty({count, T + 1}, at::kLong);                // (B, T+1)
  int64_t* out = buf.data_ptr<int64_t>();
  for (int64_t b = 0; b < count; ++b) {
    const int64_t start = ((first + b) * T) % (span + 1);
    for (int64_t t = 0; t <= T; ++t) out[b * (T + 1) + t] = tokens_[start + t];
  }
  Batch batch;
  batch.inputs = buf.narrow(1, 0, T).contiguous().to(device);
  batch.targets = buf.narrow(1, 1, T).contiguous().to(device);
  return batch;
}

void writeTokenFile(const std::string& path, const std::vector<uint16_t>& tokens, bool with_header) {
  // Through files::AtomicFile, as every file trainscope writes: never through a link at `path`.
  // Replaces any regular file (a test's fixture), never a link's target, a FIFO or a folder.
  files::OutputRule rule;
  rule.field = "token file";
  rule.overwrite = true;
  files::AtomicFile file(path, rule);
  if (with_header) {
    int32_t header[kLlmcHeaderInts] = {};
    header[0] = kLlmcMagic;
    header[1] = 1;
    header[2] = static_cast<int32_t>(tokens.size());
    file.stream().write(reinterpret_cast<const char*>(header), sizeof(header));
  }
  file.stream().write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  file.commit();
}

}  // namespace trainscope::runtime
