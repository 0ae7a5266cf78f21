// workloads_test.cpp — workload files (shipped, Hugging Face configs, bad keys, absurd sizes), the
// analytic parameter counts, the FLOPs formula, and mixture-of-experts workloads.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "../common/cli.h"
#include "trainscope/common/error.h"
#include "trainscope/workloads/flops.h"
#include "trainscope/workloads/memory.h"
#include "trainscope/workloads/workload.h"

namespace wl = trainscope::workloads;
using trainscope::UserError;
using trainscope::testing::tempPath;

TEST(Workloads, Gpt2SmallHasItsKnownParameterCount) {
  EXPECT_EQ(wl::load("gpt2-124m").parameterCount(), 124439808);
  EXPECT_EQ(wl::load("gpt2-1.5b").parameterCount(), 1557611200);
}

TEST(Workloads, AllShippedWorkloadsLoadAndValidate) {
  auto names = wl::available();
  ASSERT_GE(names.size(), 11u);
  for (const auto& n : names) EXPECT_NO_THROW(wl::load(n)) << n;
}

TEST(Workloads, ReadsHuggingFaceGpt2Config) {
  std::string p = tempPath("config.json");
  std::ofstream(p) << R"({"model_type":"gpt2","n_layer":3,"n_head":4,"n_embd":64,"n_positions":128,
                          "n_ctx":128,"vocab_size":500,"activation_function":"gelu_new"})";
  wl::Workload w = wl::load(p);
  EXPECT_EQ(w.n_layer, 3);
  EXPECT_EQ(w.n_head, 4);
  EXPECT_EQ(w.vocab_size, 500);
}

TEST(Workloads, HeadsNotDividingHiddenIsAUserError) {
  std::string p = tempPath("bad_heads.json");
  std::ofstream(p) << R"({"n_layer":2,"n_head":3,"n_embd":32,"n_positions":64,"vocab_size":128})";
  try {
    wl::load(p);
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_EQ(e.field(), "workload.n_head");
  }
}

TEST(Workloads, HuggingFaceMlpWidthOtherThan4CIsRejected) {
  std::string p = tempPath("inner.json");
  std::ofstream(p) << R"({"n_layer":2,"n_head":2,"n_embd":32,"n_positions":64,"vocab_size":128,"n_inner":100})";
  try {
    wl::load(p);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.field(), "workload.n_inner");
  }
}

TEST(Workloads, UnknownNameListsTheAvailableOnes) {
  try {
    wl::load("gpt5");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.field(), "--workload");
    EXPECT_NE(std::string(e.what()).find("gpt2-124m"), std::string::npos);
  }
}

TEST(Workloads, MissingFieldIsNamed) {
  std::string p = tempPath("missing.json");
  std::ofstream(p) << R"({"n_layer":2,"n_head":2,"n_positions":64,"vocab_size":128})";
  try {
    wl::load(p);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.field(), "workload.n_embd");
  }
}

TEST(Flops, MatchesNarayananFormulas) {
  // Megatron-LM paper: 96 B s l h^2 (1 + s/6h + V/16lh) with full recomputation.
  const double B = 8, s = 2048, l = 24, h = 2048, V = 50257;
  auto f = wl::stepFlops(8, 2048, 24, 2048, 50257, wl::Recompute::Full);
  EXPECT_NEAR(f.hardware / (96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))), 1.0, 1e-12);
  EXPECT_NEAR(f.model / (72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))), 1.0, 1e-12);
  auto sel = wl::stepFlops(8, 2048, 24, 2048, 50257, wl::Recompute::Selective);
  EXPECT_DOUBLE_EQ(sel.hardware - sel.model, 4 * B * s * s * h * l);
}

// ---- workload files: unknown keys, the stock Hugging Face config, absurd sizes ------------------

namespace {
std::string loadError(const std::string& name, const std::string& json, std::string* field = nullptr) {
  const std::string p = tempPath(name);
  std::ofstream(p) << json;
  try {
    wl::load(p);
  } catch (const UserError& e) {
    if (field) *field = e.field();
    return e.what();
  }
  return "";
}
const char* kShape = R"("n_layer":2,"n_head":2,"n_embd":32,"n_positions":64,"vocab_size":128)";
}  // namespace

TEST(Workloads, UnknownKeysInAWorkloadFileAreRefusedNamingTheNearestKnownKey) {
  std::string field;
  // A misspelling: the key it meant is named.
  std::string e = loadError("typo.json", std::string("{") + kShape + R"(,"dropuot":0.1})", &field);
  EXPECT_EQ(field, "workload.dropuot") << e;
  EXPECT_NE(e.find("unknown key \"dropuot\""), std::string::npos) << e;
  EXPECT_NE(e.find("nearest known key"), std::string::npos) << e;
  // An extra n_layers beside n_layer.
  e = loadError("extra.json", std::string("{") + kShape + R"(,"n_layers":48})", &field);
  EXPECT_EQ(field, "workload.n_layers") << e;
  EXPECT_NE(e.find("did you mean \"n_layer\"? (that key is set as well)"), std::string::npos) << e;
  // A key of another architecture.
  e = loadError("gqa.json", std::string("{") + kShape + R"(,"n_kv_head":8})", &field);
  EXPECT_EQ(field, "workload.n_kv_head") << e;
  // A Hugging Face key in a trainscope file: says how the two formats are told apart.
  e = loadError("hfkey.json", std::string("{") + kShape + R"(,"resid_pdrop":0.1})", &field);
  EXPECT_EQ(field, "workload.resid_pdrop") << e;
  EXPECT_NE(e.find("\"model_type\": \"gpt2\""), std::string::npos) << e;
  // A Llama-family config.json with its model_type cut: the missing key is named, not "hidden_size".
  e = loadError("no-model-type.json",
                R"({"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"intermediate_size":128})",
                &field);
  EXPECT_EQ(field, "workload.model_type") << e;
  EXPECT_NE(e.find("has Hugging Face config.json keys (\"hidden_size\") but no \"model_type\""), std::string::npos) << e;
  EXPECT_NE(e.find("one of gpt2, llama, mistral, qwen2, mixtral, qwen2_moe"), std::string::npos) << e;
  // Known keys still load.
  EXPECT_EQ(loadError("ok.json", std::string("{") + kShape + R"(,"name":"x","description":"y","n_ctx":64})"), "");
}

TEST(Workloads, TheStockHuggingFaceGpt2ConfigLoadsWithANoteThatDropoutIsNotTrained) {
  // openai-community/gpt2's config.json, as downloaded.
  const std::string p = tempPath("gpt2-config.json");
  std::ofstream(p) << R"({
  "activation_function": "gelu_new",
  "architectures": [
    "GPT2LMHeadModel"
  ],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": 768,
  "n_head": 12,
  "n_layer": 12,
  "n_positions": 1024,
  "resid_pdrop": 0.1,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "task_specific_params": {
    "text-generation": {
      "do_sample": true,
      "max_length": 50
    }
  },
  "vocab_size": 50257
}
)";
  const wl::Workload w = wl::load(p);
  EXPECT_EQ(w.parameterCount(), 124439808);
  ASSERT_EQ(w.notes.size(), 1u);
  EXPECT_NE(w.notes[0].find("resid_pdrop 0.1, embd_pdrop 0.1, attn_pdrop 0.1"), std::string::npos) << w.notes[0];
  EXPECT_NE(w.notes[0].find("trains without dropout"), std::string::npos) << w.notes[0];
}

TEST(Workloads, ModelTypeMustBeTheStringGpt2AndHuggingFaceTyposAreRefused) {
  std::string field;
  for (const char* type : {"5", "null", "\"llama\"", "[\"gpt2\"]"}) {
    const std::string e = loadError("type.json", std::string("{") + kShape + ",\"model_type\":" + type + "}", &field);
    EXPECT_EQ(field, "workload.model_type") << type << ": " << e;
  }
  // In a Hugging Face config, transformers' other keys load; a misspelt or unknown shape key does not.
  const std::string hf = std::string("{\"model_type\":\"gpt2\",") + kShape;
  EXPECT_EQ(loadError("hf.json", hf + R"(,"transformers_version":"4.44.0","use_cache":true,"torch_dtype":"float32"})"), "");
  EXPECT_NE(loadError("hf-typo.json", hf + R"(,"n_layers":24})", &field), "");
  EXPECT_EQ(field, "workload.n_layers");
  EXPECT_NE(loadError("hf-moe.json", hf + R"(,"n_experts":8})", &field), "");
  EXPECT_EQ(field, "workload.n_experts");
  EXPECT_NE(loadError("hf-act.json", hf + R"(,"activation_function":5})", &field), "");
  EXPECT_EQ(field, "workload.activation_function");
  EXPECT_NE(loadError("hf-drop.json", hf + R"(,"attn_pdrop":1.5})", &field), "");
  EXPECT_EQ(field, "workload.attn_pdrop");
}

TEST(Workloads, AbsurdSizesAreRefusedBeforeAnyModelIsBuilt) {
  std::string field;
  // 2^31 - 1 layers: the memory model's per-layer tensor list would allocate until killed.
  std::string e = loadError("deep.json", R"({"n_layer":2147483647,"n_head":2,"n_embd":32,"n_positions":64,"vocab_size":128})",
                            &field);
  EXPECT_EQ(field, "workload.n_layer") << e;
  // 12·C² overflows int64 for C = 2^31 - 1 (n_head 1 divides it).
  e = loadError("wide.json", R"({"n_layer":1,"n_head":1,"n_embd":2147483647,"n_positions":64,"vocab_size":128})", &field);
  EXPECT_EQ(field, "workload") << e;
  EXPECT_NE(e.find("parameters, beyond what trainscope models"), std::string::npos) << e;
  EXPECT_NO_THROW(wl::load("gpt3-175b"));
}

// ---- mixture-of-experts workloads (docs/architecture.md, "Mixture of experts") ------------------

TEST(MoeWorkloads, PresetsCountTotalAndActiveParametersByHand) {
  // DeepSpeed-MoE's 1.3B+MoE-128 (its Table 1: 52B): 12 of 24 layers hold 128 experts of 8C² + 5C
  // plus a router of 128·C instead of one 4C MLP; a token passes through one expert.
  const wl::Workload ds = wl::load("gpt-moe-1.3b-128e");
  const int64_t C = ds.n_embd, dense = wl::load("gpt3-1.3b").parameterCount();
  EXPECT_EQ(ds.moeLayers(), 12);
  EXPECT_EQ(ds.parameterCount(), dense + 12 * (128 * C + 127 * (8 * C * C + 5 * C)));
  EXPECT_EQ(ds.activeParameterCount(), dense + 12 * 128 * C);
  EXPECT_NEAR(double(ds.parameterCount()) / 52e9, 1.0, 0.01);
  // Mixtral-like: 8 GELU experts of width F = 14336 in all 32 layers, top-2.
  const wl::Workload mx = wl::load("mixtral-8x7b-like");
  const int64_t H = 4096, F = 14336, expert = 2 * H * F + F + H;
  const int64_t base = 32000 * H + 32768 * H + 32 * (4 * H * H + 8 * H) + 2 * H;  // no MLP
  EXPECT_EQ(mx.parameterCount(), base + 32 * (8 * H + 8 * expert));
  EXPECT_EQ(mx.activeParameterCount(), base + 32 * (8 * H + 2 * expert));
  EXPECT_FALSE(mx.notes.empty());  // says the experts are GELU, not SwiGLU
  // The memory model's tensor list covers the same parameters.
  for (const auto* w : {&ds, &mx}) {
    int64_t n = 0;
    for (const auto& t : wl::parameterTensors(*w)) n += t.numel();
    EXPECT_EQ(n, w->parameterCount()) << w->name;
  }
  // A dense workload is unchanged: active = total.
  const wl::Workload g = wl::load("gpt2-124m");
  EXPECT_EQ(g.activeParameterCount(), g.parameterCount());
}

TEST(MoeWorkloads, FlopsCountActiveExpertsAndDenseIsUnchanged) {
  const wl::Workload g = wl::load("gpt2-124m");
  EXPECT_EQ(wl::stepFlops(g, 8, 1024, wl::Recompute::Full).model,
            wl::stepFlops(8, 1024, g.n_layer, g.n_embd, g.vocab_size, wl::Recompute::Full).model);
  // tiny-moe: every layer top-2 of 4 experts of width 4C: per token forward each layer's MLP costs
  // 2·C·E (router) + 2·(4·C·4C) instead of 16·C²: 16·C² + 2·C·E more.
  const wl::Workload m = wl::load("tiny-moe");
  const double C = 32, tokens = 4.0 * 32, E = 4;
  const auto dense = wl::stepFlops(4, 32, m.n_layer, m.n_embd, m.vocab_size, wl::Recompute::Full);
  const auto moe = wl::stepFlops(m, 4, 32, wl::Recompute::Full);
  const double per_fwd = 2 * tokens * (16 * C * C + 2 * C * E);
  EXPECT_DOUBLE_EQ(moe.model - dense.model, 3 * per_fwd);
  EXPECT_DOUBLE_EQ(moe.hardware - dense.hardware, 4 * per_fwd);  // full recomputation runs it again
}

TEST(MoeWorkloads, BadKeysAreUserErrorsNamingTheKeyAndTheFix) {
  std::string field;
  auto moe = [](const std::string& extra) { return std::string("{") + kShape + R"(,"n_experts":4)" + extra + "}"; };
  std::string e = loadError("k5.json", moe(R"(,"top_k":5)"), &field);  // more than the 4 experts
  EXPECT_EQ(field, "workload.top_k") << e;
  EXPECT_NE(e.find("set top_k to 1"), std::string::npos) << e;
  e = loadError("e1.json", std::string("{") + kShape + R"(,"n_experts":1})", &field);
  EXPECT_EQ(field, "workload.n_experts") << e;
  e = loadError("every.json", moe(R"(,"moe_every":3)"), &field);  // beyond n_layer = 2
  EXPECT_EQ(field, "workload.moe_every") << e;
  e = loadError("cf.json", moe(R"(,"capacity_factor":-1)"), &field);
  EXPECT_EQ(field, "workload.capacity_factor") << e;
  EXPECT_NE(e.find("drop-less"), std::string::npos) << e;
  e = loadError("aux.json", moe(R"(,"aux_loss_coeff":"big")"), &field);
  EXPECT_EQ(field, "workload.aux_loss_coeff") << e;
  e = loadError("shared.json", moe(R"(,"shared_expert":1)"), &field);
  EXPECT_EQ(field, "workload.shared_expert") << e;
  // A MoE key on a dense model: says to set n_experts.
  e = loadError("dense.json", std::string("{") + kShape + R"(,"top_k":2})", &field);
  EXPECT_EQ(field, "workload.top_k") << e;
  EXPECT_NE(e.find("set n_experts"), std::string::npos) << e;
  // And good ones load.
  EXPECT_EQ(loadError("ok.json", moe(R"(,"top_k":2,"moe_every":2,"capacity_factor":1.25,"shared_expert":true)")), "");
}
