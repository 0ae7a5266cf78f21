// test_data.cpp — token files (nanoGPT and llm.c layouts), bad files, sampling, the run database.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>

#include "util.h"
#include "trainscope/common/error.h"
#include "trainscope/runtime/data.h"

namespace rt = trainscope::runtime;
using trainscope::UserError;
using namespace trainscope::testing;

namespace {
std::vector<uint16_t> ramp(int n, int vocab) {
  std::vector<uint16_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = uint16_t(i % vocab);
  return t;
}
std::string fieldOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.field() + ": " + e.what();
  }
  return "no error";
}
}  // namespace

TEST(TokenFile, ReadsBothLayoutsIdentically) {
  auto toks = ramp(1000, 100);
  std::string raw = tempPath("raw.bin"), llmc = tempPath("llmc.bin");
  rt::writeTokenFile(raw, toks, false);
  rt::writeTokenFile(llmc, toks, true);
  rt::TokenSource a(raw, 128, 16, 0), b(llmc, 128, 16, 0);
  EXPECT_EQ(a.tokenCount(), 1000);
  EXPECT_EQ(b.tokenCount(), 1000);
  auto ba = a.samples(3, 2, at::kCPU), bb = b.samples(3, 2, at::kCPU);
  EXPECT_TRUE(at::equal(ba.inputs, bb.inputs));
  // targets are inputs shifted by one
  EXPECT_TRUE(at::equal(ba.inputs.narrow(1, 1, 15), ba.targets.narrow(1, 0, 15)));
  EXPECT_EQ(ba.inputs[0][0].item<int64_t>(), (3 * 16) % 100);
}

TEST(TokenFile, MissingTruncatedAndOutOfVocabAreUserErrors) {
  EXPECT_NE(fieldOf([] { rt::TokenSource("/nonexistent/tokens.bin", 128, 16, 0); }).find("--data"),
            std::string::npos);
  std::string llmc = tempPath("trunc.bin");
  rt::writeTokenFile(llmc, ramp(1000, 100), true);
  std::filesystem::resize_file(llmc, 1024 + 500);  // header + 250 of the promised 1000 tokens
  EXPECT_NE(fieldOf([&] { rt::TokenSource(llmc, 128, 16, 0); }).find("truncated"), std::string::npos);
  std::string odd = tempPath("odd.bin");
  std::ofstream(odd, std::ios::binary) << "abc";
  EXPECT_NE(fieldOf([&] { rt::TokenSource(odd, 128, 16, 0); }).find("truncated"), std::string::npos);
  std::string big = tempPath("big.bin");
  rt::writeTokenFile(big, ramp(1000, 1000), false);
  EXPECT_NE(fieldOf([&] { rt::TokenSource(big, 128, 16, 0); }).find("vocab_size"), std::string::npos);
  std::string tiny = tempPath("short.bin");
  rt::writeTokenFile(tiny, ramp(10, 10), false);
  EXPECT_NE(fieldOf([&] { rt::TokenSource(tiny, 128, 16, 0); }).find("fewer than one sequence"), std::string::npos);
}

TEST(TokenFile, TrainsFromAFile) {
  std::string f = tempPath("train.bin");
  rt::writeTokenFile(f, ramp(5000, 50), true);
  rt::TrainConfig c = tinyConfig(4, 1, 32);
  c.data = f;
  c.lr = 3e-3;
  rt::Trainer t(c, cpu());
  double first = t.step().loss, last = first;
  for (int k = 0; k < 20; ++k) last = t.step().loss;
  EXPECT_LT(last, 0.7 * first);  // a ramp is easy to predict
}
