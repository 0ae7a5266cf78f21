// safetensors_test.cpp — the safetensors format (common/safetensors.h) and a workload's Hugging Face
// layout (workloads/hf_checkpoint.h): round trips, sharding with its index, malformed files refused
// naming the flag, config.json read back as the same architecture, fused tensors cut as transformers
// names them.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "../common/cli.h"
#include "trainscope/common/error.h"
#include "trainscope/common/safetensors.h"
#include "trainscope/workloads/hf_checkpoint.h"
#include "trainscope/workloads/memory.h"
#include "trainscope/workloads/workload.h"

namespace st = trainscope::safetensors;
namespace wl = trainscope::workloads;
using trainscope::UserError;
using trainscope::testing::tempPath;

namespace {

std::string freshDir(const std::string& name) {
  const std::string d = tempPath(name);
  ::mkdir(d.c_str(), 0755);
  return d;
}

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

TEST(Safetensors, HeaderIsLengthPrefixedJsonPaddedToEightBytes) {
  const float a[3] = {1, 2, 3};
  const std::string h = st::header({{"a", "F32", {3}, a, 12}}, {{"format", "pt"}});
  ASSERT_GE(h.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(h[size_t(i)]);
  EXPECT_EQ(n + 8, h.size());
  EXPECT_EQ(h.size() % 8, 0u);
  EXPECT_NE(h.find(R"("a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]})"), std::string::npos) << h;
  EXPECT_NE(h.find(R"("__metadata__":{"format":"pt"})"), std::string::npos) << h;
  EXPECT_THROW(st::header({{"a", "F32", {4}, a, 12}}, {}), std::invalid_argument);
}

TEST(Safetensors, FileRoundTripsTensorsAndMetadata) {
  const std::string d = freshDir("st-roundtrip");
  const float a[6] = {1, 2, 3, 4, 5, 6};
  const int8_t b[2] = {-3, 7};
  const std::string p = d + "/x.safetensors";
  ::unlink(p.c_str());
  st::writeFile(p, {{"w", "F32", {2, 3}, a, 24}, {"q", "I8", {2}, b, 2}}, {{"format", "pt"}}, "--save");
  std::map<std::string, std::string> meta;
  auto m = st::readFile(p, "--resume", &meta);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m["w"].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(m["w"].bytes.data(), a, 24), 0);
  EXPECT_EQ(m["q"].dtype, "I8");
  EXPECT_EQ(m["q"].bytes[1], 7);
  EXPECT_EQ(meta["format"], "pt");
  // A new file only: nothing at the path is ever replaced.
  EXPECT_THROW(st::writeFile(p, {{"w", "F32", {2, 3}, a, 24}}, {}, "--save"), UserError);
}

TEST(Safetensors, ModelPastTheShardSizeIsShardedWithAnIndex) {
  const std::string d = freshDir("st-shards");
  for (const char* f : {"model.safetensors", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                        "model.safetensors.index.json"})
    ::unlink((d + "/" + f).c_str());
  std::vector<float> a(100, 1.5f), b(100, -2.0f);
  st::writeModel(d, {{"a", "F32", {100}, a.data(), 400}, {"b", "F32", {10, 10}, b.data(), 400}}, {}, 500, "--save");
  const std::string index = slurp(d + "/model.safetensors.index.json");
  EXPECT_NE(index.find(R"("total_size": 800)"), std::string::npos) << index;
  EXPECT_NE(index.find(R"("b": "model-00002-of-00002.safetensors")"), std::string::npos) << index;
  auto m = st::readModel(d, "--resume");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m["b"].shape, (std::vector<int64_t>{10, 10}));
  float x;
  std::memcpy(&x, m["b"].bytes.data(), 4);
  EXPECT_EQ(x, -2.0f);
}

TEST(Safetensors, MalformedFilesAreRefusedNamingTheFlag) {
  const std::string d = freshDir("st-bad");
  auto refused = [&](const std::string& bytes, const std::string& what) {
    const std::string p = d + "/bad.safetensors";
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
    try {
      st::readFile(p, "--resume");
      ADD_FAILURE() << "accepted: " << what;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("--resume"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused("abc", "shorter than its 8-byte header length");
  refused(std::string("\xff\xff\xff\xff\0\0\0\0", 8) + "{}", "past the file");
  auto withHeader = [](const std::string& json, const std::string& data) {
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[size_t(i)] = char((json.size() >> (8 * i)) & 0xff);
    return len + json + data;
  };
  refused(withHeader("[1]", ""), "not a JSON object");
  refused(withHeader(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "1234"), "data_offsets");
  refused(withHeader(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "12345678"), "cover");
  refused(withHeader(R"({"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}})", "1234"), "unknown dtype");
  // A folder whose index names a file outside it.
  std::ofstream(d + "/model.safetensors.index.json") << R"({"weight_map": {"a": "../x.safetensors"}})";
  EXPECT_THROW(st::readModel(d, "--init-from"), UserError);
}

// A Hub folder with only pytorch_model.bin (older checkpoints): the refusal says the format is not
// read and how to convert it, not that model.safetensors "does not exist".
TEST(Safetensors, APickleOnlyFolderIsRefusedWithTheConversion) {
  for (const char* pickle : {"pytorch_model.bin", "pytorch_model.bin.index.json"}) {
    const std::string d = freshDir("st-pickle-" + std::to_string(std::string(pickle).size()));
    std::ofstream(d + "/" + pickle) << "PK";
    try {
      st::readModel(d, "--init-from");
      ADD_FAILURE() << "accepted a folder with only " << pickle;
    } catch (const UserError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.field(), "--init-from");
      EXPECT_NE(what.find(pickle), std::string::npos) << what;
      EXPECT_NE(what.find("save_pretrained"), std::string::npos) << what;
    }
  }
}

TEST(HfCheckpoint, ConfigJsonReadsBackAsTheSameArchitecture) {
  for (const char* name : {"tiny", "gpt2-124m", "tiny-llama", "llama3-8b", "llama3.1-405b", "mistral-7b",
                           "qwen2.5-7b", "tiny-mixtral", "mixtral-8x7b"}) {
    const wl::Workload w = wl::load(name);
    ASSERT_EQ(wl::hfUnsupported(w), "") << name;
    const std::string p = tempPath(std::string("hf-") + name + ".json");
    std::ofstream(p, std::ios::trunc) << wl::hfConfigJson(w, "--save");
    const wl::Workload back = wl::load(p);
    const auto a = wl::parameterTensors(w), b = wl::parameterTensors(back);
    ASSERT_EQ(a.size(), b.size()) << name;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].name, b[i].name) << name;
      EXPECT_EQ(a[i].shape, b[i].shape) << name << " " << a[i].name;
    }
    EXPECT_EQ(back.norm, w.norm) << name;
    EXPECT_EQ(back.positions, w.positions) << name;
    EXPECT_EQ(back.rope_theta, w.rope_theta) << name;
    EXPECT_EQ(back.rope_scaling.factor, w.rope_scaling.factor) << name;
    EXPECT_EQ(back.norm_eps, w.norm_eps) << name;
    EXPECT_EQ(back.tie_embeddings, w.tie_embeddings) << name;
    EXPECT_EQ(back.kvHeads(), w.kvHeads()) << name;
    EXPECT_EQ(back.qkv_bias, w.qkv_bias) << name;
    EXPECT_EQ(back.parameterCount(), w.parameterCount()) << name;
    EXPECT_EQ(wl::hfModelType(back), wl::hfModelType(w)) << name;
  }
}

TEST(HfCheckpoint, ShapesTransformersHasNoModelOfAreRefusedNamingTheFlag) {
  wl::Workload w = wl::load("tiny-moe");  // GPT-2 with experts: no such transformers model
  EXPECT_NE(wl::hfUnsupported(w), "");
  try {
    wl::hfConfigJson(w, "--save");
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--save"), std::string::npos) << e.what();
  }
}

TEST(HfCheckpoint, FlatTensorsMapToTransformersNames) {
  const wl::Workload g = wl::load("tiny");
  auto p = wl::hfPieces(g, "h.1.attn.c_attn.weight", {96, 32});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].name, "transformer.h.1.attn.c_attn.weight");
  EXPECT_TRUE(p[0].transpose);  // Conv1D: (in, out)
  EXPECT_FALSE(wl::hfPieces(g, "h.0.ln_1.bias", {32})[0].transpose);
  EXPECT_EQ(wl::hfPieces(g, "wte", {128, 32})[0].name, "transformer.wte.weight");

  const wl::Workload l = wl::load("tiny-llama");
  const int64_t q = l.n_head * l.headSize(), kv = l.kvHeads() * l.headSize();
  p = wl::hfPieces(l, "h.0.attn.c_attn.weight", {q + 2 * kv, l.n_embd});
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(p[1].name, "model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(p[1].row_begin, q);
  EXPECT_EQ(p[2].row_begin, q + kv);
  EXPECT_EQ(p[2].rows, kv);
  p = wl::hfPieces(l, "h.0.mlp.c_fc.weight", {2 * l.ffnHidden(), l.n_embd});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].name, "model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(p[1].name, "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(p[1].row_begin, l.ffnHidden());
  EXPECT_EQ(wl::hfPieces(l, "ln_f.weight", {l.n_embd})[0].name, "model.norm.weight");

  const wl::Workload m = wl::load("tiny-mixtral");
  const int64_t F = m.expertHidden();
  p = wl::hfPieces(m, "h.1.mlp.experts.c_fc.weight", {m.n_experts, 2 * F, m.n_embd});
  ASSERT_EQ(p.size(), size_t(2 * m.n_experts));
  EXPECT_EQ(p[0].name, "model.layers.1.block_sparse_moe.experts.0.w1.weight");
  EXPECT_EQ(p[1].name, "model.layers.1.block_sparse_moe.experts.0.w3.weight");
  EXPECT_EQ(p[1].expert, 0);
  EXPECT_EQ(p[1].row_begin, F);
  EXPECT_EQ(wl::hfPieces(m, "h.0.mlp.experts.c_proj.weight", {m.n_experts, m.n_embd, F})[3].name,
            "model.layers.0.block_sparse_moe.experts.3.w2.weight");
  EXPECT_EQ(wl::hfPieces(m, "h.0.mlp.router.weight", {m.n_experts, m.n_embd})[0].name,
            "model.layers.0.block_sparse_moe.gate.weight");

  // Qwen2-MoE: mlp.gate, mlp.experts.E.{gate,up,down}_proj, the shared expert at its own width and its gate.
  const wl::Workload qm = wl::load("tiny-qwen2-moe");
  const int64_t Fq = qm.expertHidden(), Fs = qm.sharedExpertHidden();
  p = wl::hfPieces(qm, "h.1.mlp.experts.c_fc.weight", {qm.n_experts, 2 * Fq, qm.n_embd});
  ASSERT_EQ(p.size(), size_t(2 * qm.n_experts));
  EXPECT_EQ(p[2].name, "model.layers.1.mlp.experts.1.gate_proj.weight");
  EXPECT_EQ(p[3].name, "model.layers.1.mlp.experts.1.up_proj.weight");
  EXPECT_EQ(p[3].row_begin, Fq);
  EXPECT_EQ(wl::hfPieces(qm, "h.0.mlp.experts.c_proj.weight", {qm.n_experts, qm.n_embd, Fq})[3].name,
            "model.layers.0.mlp.experts.3.down_proj.weight");
  EXPECT_EQ(wl::hfPieces(qm, "h.0.mlp.router.weight", {qm.n_experts, qm.n_embd})[0].name, "model.layers.0.mlp.gate.weight");
  p = wl::hfPieces(qm, "h.0.mlp.shared.c_fc.weight", {2 * Fs, qm.n_embd});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].name, "model.layers.0.mlp.shared_expert.gate_proj.weight");
  EXPECT_EQ(p[1].name, "model.layers.0.mlp.shared_expert.up_proj.weight");
  EXPECT_EQ(p[1].row_begin, Fs);
  EXPECT_EQ(p[1].rows, Fs);
  EXPECT_EQ(wl::hfPieces(qm, "h.0.mlp.shared.c_proj.weight", {qm.n_embd, Fs})[0].name,
            "model.layers.0.mlp.shared_expert.down_proj.weight");
  EXPECT_EQ(wl::hfPieces(qm, "h.1.mlp.shared_gate.weight", {1, qm.n_embd})[0].name,
            "model.layers.1.mlp.shared_expert_gate.weight");
}
