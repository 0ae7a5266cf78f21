// architecture_audit_test.cpp — what the audit of the decoder architectures against transformers and
// Megatron-LM found (2026-12-07, /work/audit-arch.md):
//   config.json values transformers refuses or cannot build (num_key_value_heads 0, an odd RoPE head
//   size, sliding_window <= 0, a Llama 3 rope factor below 1, a mixtral without experts, a llama whose
//   heads do not divide hidden_size) are refused naming the key, never read as another model;
//   `predict --framework megatron`'s weights + optimizer column of a MoE counts the experts, as
//   megatron-core 0.19.2's theoretical_memory_usage.py does (it used to count a GPT dense layer);
//   Megatron-LM's export keeps a sliding window (--window-size W-1,0; Qwen2's full layers as
//   --window-attn-skip-freq's list), and a seq beyond n_positions names the flag and its bound.
#include <gtest/gtest.h>

#include <string>

#include "trainscope/common/error.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/tuner/export.h"
#include "trainscope/tuner/models.h"
#include "trainscope/tuner/space.h"
#include "trainscope/models/plan.h"
#include "trainscope/workloads/hf_config.h"
#include <nlohmann/json.hpp>
#include <tuple>
#include <vector>
#include "trainscope/workloads/workload.h"

namespace ts = trainscope;
namespace wl = trainscope::workloads;
namespace tn = trainscope::tuner;
namespace rt = trainscope::runconfig;

namespace {

const std::string kLlama = R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 176,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
  "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu",
  "tie_word_embeddings": false})";

std::string with(const std::string& base, const std::string& extra) {
  return base.substr(0, base.rfind('}')) + ", " + extra + "}";
}

std::string as(const std::string& type, const std::string& base) {
  std::string t = base;
  const std::string from = R"("model_type": "llama")";
  return t.replace(t.find(from), from.size(), "\"model_type\": \"" + type + "\"");
}

// The refusal's field and message, or "" when `text` loads.
std::pair<std::string, std::string> refusal(const std::string& text) {
  try {
    wl::parse(text, "test/config.json");
  } catch (const ts::UserError& e) {
    return {e.field(), e.what()};
  }
  return {"", ""};
}

// A resolved one-process run of `w` (seq 64), with cp context-parallel ranks, for an export.
rt::TrainConfig runOf(const wl::Workload& w, int64_t cp = 1) {
  rt::TrainConfig c;
  c.workload = "small-cpu";
  c.seq = cp % 3 == 0 ? 96 : 64, c.mbs = 1, c.gbs = 8, c.nproc = int(cp), c.cp = cp;
  c = tn::trainingRunOf(c);
  c.model = w;
  c.workload = w.name;
  return c;
}

std::string megatronFlags(const wl::Workload& w, int64_t cp = 1) {
  return tn::exportConfig(runOf(w, cp), tn::ExportFormat::Megatron).text;
}

}  // namespace

TEST(ArchitectureAudit, ValuesTransformersCannotBuildAreRefusedByKey) {
  // num_key_value_heads 0: transformers divides by it; it used to load as n_head (MHA), 8.8B for Llama 3.1 8B.
  auto r = refusal(with(kLlama, R"("num_key_value_heads": 0)").replace(kLlama.find(R"("num_key_value_heads": 2)"), 25, ""));
  EXPECT_EQ(r.first, "workload.num_key_value_heads") << r.second;
  EXPECT_EQ(refusal(with(kLlama, R"("num_key_value_heads": null)").replace(kLlama.find(R"("num_key_value_heads": 2)"), 25, "")).first, "")
      << "null is transformers' default (num_attention_heads)";
  // An odd RoPE head size: `run` used to stop in the rotation ("shape '[1, 3]' is invalid …").
  r = refusal(with(kLlama, R"("head_dim": 7)"));
  EXPECT_EQ(r.first, "workload.head_dim") << r.second;
  EXPECT_NE(r.second.find("even"), std::string::npos) << r.second;
  EXPECT_EQ(refusal(with(kLlama, R"("head_dim": 8)")).first, "");  // even, ≠ 64 / 4: Mistral-Nemo's case
  // sliding_window 0 or negative: no key for any query (it used to load as "no window").
  const std::string mistral = as("mistral", kLlama);
  for (const char* w : {"0", "-5"}) {
    r = refusal(with(mistral, std::string(R"("sliding_window": )") + w));
    EXPECT_EQ(r.first, "workload.sliding_window") << w << ": " << r.second;
    EXPECT_NE(r.second.find("null"), std::string::npos) << r.second;
  }
  EXPECT_EQ(refusal(with(mistral, R"("sliding_window": null)")).first, "");
  EXPECT_EQ(refusal(with(mistral, R"("sliding_window": 16)")).first, "");
  // Llama 3's rope factor 0 (or below 1) used to load as "no scaling"; missing was refused already.
  for (const char* f : {"0.0", "0.5"}) {
    const std::string scaling = std::string(R"("rope_scaling": {"rope_type": "llama3", "factor": )") + f +
                                R"(, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64})";
    r = refusal(with(kLlama, scaling));
    EXPECT_EQ(r.first, "workload.rope_scaling.factor") << f << ": " << r.second;
    // transformers 5's rope_parameters alike.
    const std::string v5 = std::string(R"("rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": )") +
                           f + R"(, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64})";
    EXPECT_EQ(refusal(with(kLlama, v5)).first, "workload.rope_scaling.factor") << f;
  }
  // A mixtral without experts used to load as the dense Mistral (7.24B for Mixtral-8x7B's shape).
  r = refusal(with(as("mixtral", kLlama), R"("num_local_experts": 0)"));
  EXPECT_EQ(r.first, "workload.num_local_experts") << r.second;
  EXPECT_NE(r.second.find("mistral"), std::string::npos) << r.second;
  // LlamaConfig refuses heads that do not divide hidden_size, head_dim or not; Mistral's does not.
  std::string odd_heads = with(kLlama, R"("head_dim": 16)");
  odd_heads.replace(odd_heads.find(R"("num_attention_heads": 4, "num_key_value_heads": 2)"), 50,
                    R"("num_attention_heads": 6, "num_key_value_heads": 2)");
  EXPECT_EQ(refusal(odd_heads).first, "workload.num_attention_heads");
  EXPECT_EQ(refusal(as("mistral", odd_heads)).first, "");
  // intermediate_size 0 used to read as 4·hidden_size (Llama 3.1 8B's shape: 8.84B where transformers
  // builds 2.39B), head_dim 0 as hidden/heads (transformers: ZeroDivisionError in RoPE).
  std::string no_mlp = kLlama;
  no_mlp.replace(no_mlp.find(R"("intermediate_size": 176)"), 24, R"("intermediate_size": 0)");
  EXPECT_EQ(refusal(no_mlp).first, "workload.intermediate_size");
  EXPECT_EQ(refusal(with(kLlama, R"("head_dim": 0)")).first, "workload.head_dim");
  EXPECT_EQ(refusal(with(kLlama, R"("head_dim": null)")).first, "");
}

TEST(ArchitectureAudit, MegatronColumnOfAMixtureOfExpertsCountsItsExperts) {
  // Mixtral-8x7B's shape, dp 8 × tp 2, --ep 1 and 4, distributed optimizer: megatron-core 0.19.2's
  // theoretical_memory_usage.py with --expert-tensor-parallel-size 1 holds per rank the attention ÷ tp,
  // the norms and the router whole, the 8 experts ÷ ep at 6 + 12/(dp·tp/ep) bytes.
  const wl::Workload w = wl::parse(R"({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
      "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
      "max_position_embeddings": 32768, "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": null,
      "hidden_act": "silu", "tie_word_embeddings": false})", "mixtral.json");
  const double h = 4096, attention = h * (4096 + 2 * 1024) + 4096 * h, experts = 8 * 3 * h * 14336;
  for (const int64_t ep : {1, 4}) {
    tn::Plan p;
    p.dp = 8, p.tp = 2, p.ep = ep, p.mbs = 1, p.gbs = 64, p.seq = 4096;
    const double bpp = 6 + 12.0 / 8, expert_bpp = 6 + 12.0 / (8 * 2 / double(ep));
    EXPECT_DOUBLE_EQ(tn::megatronBytesPerExpertParam(p, true), expert_bpp);
    EXPECT_DOUBLE_EQ(tn::megatronBytesPerExpertParam(p, false), 18.0);
    const double want = 32 * (bpp * (attention / 2 + 2 * h + 8 * h) + expert_bpp * experts / double(ep));
    EXPECT_NEAR(double(tn::megatronLayersParamsOpt(w, p, 0, true)), want, 32.0) << "ep " << ep;
    // The old column priced 12h² + 13h a layer: 22.5 GiB where megatron-core says 161 GiB at ep 1.
    EXPECT_GT(double(tn::megatronLayersParamsOpt(w, p, 0, true)), 2.0 * 32 * bpp * (12 * h * h + 13 * h) / 2);
  }
}

TEST(ArchitectureAudit, MegatronExportKeepsTheSlidingWindow) {
  const wl::Workload mistral = wl::parse(with(as("mistral", kLlama), R"("sliding_window": 16)"), "mistral.json");
  std::string flags = megatronFlags(mistral);
  EXPECT_NE(flags.find(" --window-size 15,0"), std::string::npos) << flags;
  EXPECT_EQ(flags.find("--window-attn-skip-freq"), std::string::npos) << flags;  // every layer
  EXPECT_EQ(flags.find("--cp-comm-type"), std::string::npos) << flags;
  flags = megatronFlags(mistral, 2);
  EXPECT_NE(flags.find(" --cp-comm-type a2a"), std::string::npos) << flags;
  // Qwen2 windowing layers 1 and 2 of 3 (max_window_layers 1): full, then two windowed.
  std::string qwen = with(as("qwen2", kLlama), R"("use_sliding_window": true, "sliding_window": 16, "max_window_layers": 1)");
  qwen.replace(qwen.find(R"("num_hidden_layers": 2)"), 22, R"("num_hidden_layers": 3)");
  flags = megatronFlags(wl::parse(qwen, "qwen.json"));
  EXPECT_NE(flags.find(" --window-size 15,0 --window-attn-skip-freq '[0,1,1]'"), std::string::npos) << flags;
  // No window: no flag.
  EXPECT_EQ(megatronFlags(wl::parse(kLlama, "llama.json")).find("--window-size"), std::string::npos);
}

TEST(ArchitectureAudit, ASequenceBeyondThePositionsNamesTheFlagAndItsBound) {
  const wl::Workload w = wl::parse(kLlama, "llama.json");  // max_position_embeddings 128
  tn::Plan p;
  p.seq = 256;
  const std::string why = tn::whyInvalid(w, p);
  EXPECT_NE(why.find("n_positions=128"), std::string::npos) << why;
  EXPECT_NE(why.find("max_position_embeddings"), std::string::npos) << why;
  EXPECT_NE(why.find("--seq of at most 128"), std::string::npos) << why;
}

TEST(ArchitectureAudit, TorchtitanExportSaysWhichModelItsConfigBuilds) {
  // torchtitan's model is its registry config's; the flags carry no shape. Llama 3.1 8B is llama3_8b's
  // flavor exactly; Llama 3 8B (no RoPE scaling) has its layers but not its RoPE; Mistral has no config.
  const auto notes = [](const std::string& preset, const std::string& extra = "") {
    std::string all;
    wl::Workload w = wl::load(preset);
    if (!extra.empty()) w = wl::parse(extra, "w.json");
    for (const auto& n : tn::exportConfig(runOf(w), tn::ExportFormat::Torchtitan).notes) all += n + "\n";
    return all;
  };
  const std::string llama3 = notes("llama3-8b");
  EXPECT_NE(llama3.find("--module llama3 --config llama3_8b"), std::string::npos) << llama3;
  EXPECT_NE(llama3.find("its RoPE is Llama 3.1's"), std::string::npos) << llama3;
  const std::string llama31 = notes("llama3.1-405b");
  EXPECT_NE(llama31.find("--config llama3_405b"), std::string::npos) << llama31;
  EXPECT_EQ(llama31.find("its RoPE is"), std::string::npos) << llama31;
  const std::string mistral = notes("mistral-7b");
  EXPECT_NE(mistral.find("these flags set no model"), std::string::npos) << mistral;
  EXPECT_EQ(mistral.find("--config llama3_"), std::string::npos) << mistral;
}

TEST(ArchitectureAudit, FsdpWrapsEachModelTypesOwnDecoderLayer) {
  // Accelerate's TRANSFORMER_BASED_WRAP looks the class up by name in the model: each the model type's
  // _no_split_modules in transformers 5.25 (modeling_*.py). Qwen2-MoE's export used to name GPT2Block.
  // (The class is that of the exported config.json's model_type, hfModelType's: Mistral-7B-v0.3, without
  // a window, exports as mistral, as its file says; it used to be llama.)
  const std::pair<const char*, const char*> kinds[] = {
      {"llama3-8b", "LlamaDecoderLayer"}, {"mistral-7b", "MistralDecoderLayer"}, {"", "MistralDecoderLayer"},
      {"qwen2.5-7b", "Qwen2DecoderLayer"}, {"mixtral-8x7b", "MixtralDecoderLayer"},
      {"qwen1.5-moe-a2.7b", "Qwen2MoeDecoderLayer"}, {"gpt2-124m", "GPT2Block"}};
  for (const auto& [preset, layer] : kinds) {
    rt::TrainConfig c;
    c.workload = "small-cpu";
    c.seq = 64, c.mbs = 1, c.gbs = 8, c.nproc = 2, c.zero = rt::ZeroStage::Parameters;
    c = tn::trainingRunOf(c);
    c.model = *preset ? wl::load(preset) : wl::parse(with(as("mistral", kLlama), R"("sliding_window": 16)"), "m.json");
    c.workload = c.model.name;
    const std::string yaml = tn::exportConfig(c, tn::ExportFormat::AccelerateConfig).text;
    EXPECT_NE(yaml.find(std::string("fsdp_transformer_layer_cls_to_wrap: ") + layer + "\n"), std::string::npos)
        << preset << "\n" << yaml;
  }
}

namespace {
// A small config.json of `type` with `key` set to null (and `extra` keys).
std::string nulled(const std::string& type, const std::string& key, const std::string& extra = "") {
  std::string j = R"({"model_type": ")" + type + R"(", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256, "max_position_embeddings": 128,
    "hidden_act": "silu")";
  if (key != "num_key_value_heads") j += R"(, "num_key_value_heads": 4)";
  if (!extra.empty()) j += ", " + extra;
  return j + ", \"" + key + "\": null}";
}
}  // namespace

TEST(ArchitectureAudit, NullsAreReadAsTransformersReadsThemOrRefusedByKey) {
  // transformers 5.25 refuses these nulls (its configuration's strict field check) or builds a model
  // that fails (rope_theta: None ** x; Qwen2's head_dim: None as the head size); they used to take
  // trainscope's defaults (rms_norm_eps 1e-6, rope_theta 10000, top-2).
  const std::string moe = R"("num_local_experts": 4)";
  const std::string qmoe = R"("num_experts": 4, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64)";
  const std::tuple<const char*, const char*, std::string> refused[] = {
      {"llama", "rms_norm_eps", ""},         {"mistral", "rms_norm_eps", ""},     {"qwen2", "rope_theta", ""},
      {"mixtral", "num_experts_per_tok", moe}, {"qwen2_moe", "num_experts_per_tok", qmoe}, {"qwen2", "head_dim", ""},
      {"qwen2_moe", "head_dim", qmoe},       {"mistral", "num_key_value_heads", ""}, {"llama", "tie_word_embeddings", ""},
      {"mixtral", "router_aux_loss_coef", moe}, {"qwen2", "use_sliding_window", ""}};
  for (const auto& [type, key, extra] : refused) {
    const auto r = refusal(nulled(type, key, extra));
    EXPECT_EQ(r.first, std::string("workload.") + key) << type << ": " << r.second;
    EXPECT_NE(r.second.find("is null in test/config.json"), std::string::npos) << r.second;
  }
  // rope_parameters' own rope_theta (transformers 5's form of the key), likewise.
  EXPECT_EQ(refusal(nulled("llama", "x", R"("rope_parameters": {"rope_type": "default", "rope_theta": null})")).first,
            "workload.rope_parameters.rope_theta");
  // The nulls with a meaning: head_dim (llama, mistral, mixtral: hidden / heads), sliding_window (no
  // window), num_key_value_heads (llama, qwen2: the heads), an expert key of a dense type (unused).
  for (const auto& [type, key, extra] : std::vector<std::tuple<const char*, const char*, std::string>>{
           {"llama", "head_dim", ""}, {"mistral", "head_dim", ""}, {"mixtral", "head_dim", moe},
           {"mistral", "sliding_window", ""}, {"mixtral", "sliding_window", moe}, {"qwen2", "sliding_window",
           R"("use_sliding_window": true)"}, {"llama", "num_key_value_heads", ""}, {"qwen2", "num_key_value_heads", ""},
           {"llama", "num_experts_per_tok", ""}}) {
    const std::string text = nulled(type, key, extra);
    ASSERT_EQ(refusal(text).first, "") << type << " " << key << ": " << refusal(text).second;
    const wl::Workload w = wl::parse(text, "test/config.json");
    EXPECT_EQ(w.headSize(), 16) << type << " " << key;
    if (std::string(key) == "sliding_window") EXPECT_EQ(w.sliding_window, 0) << type;  // no window
    if (std::string(key) == "num_key_value_heads") EXPECT_EQ(w.kvHeads(), 4) << type;
  }
}

TEST(ArchitectureAudit, AMistralWithoutAWindowIsExportedAsMistral) {
  // Mistral v0.3 (sliding_window null) builds what a Llama without biases builds; it used to be
  // written back as model_type llama (LlamaForCausalLM, an FSDP wrap of LlamaDecoderLayer).
  const wl::Workload v03 = wl::load("mistral-7b");
  const auto j = nlohmann::json::parse(wl::hfConfigJson(v03, "--format"));
  EXPECT_EQ(j["model_type"], "mistral");
  EXPECT_EQ(j["architectures"][0], "MistralForCausalLM");
  EXPECT_TRUE(j["sliding_window"].is_null()) << j.dump();
  EXPECT_EQ(wl::parse(j.dump(), "back/config.json").hf_model_type, "mistral");
  // The same model read as llama stays llama; a checkpoint of one loads under the other (same shape).
  std::string llama = nlohmann::json::parse(wl::hfConfigJson(v03, "--format")).dump();
  llama.replace(llama.find("\"mistral\""), 9, "\"llama\"");
  const wl::Workload as_llama = wl::parse(llama, "llama/config.json");
  EXPECT_EQ(wl::hfModelType(as_llama), "llama");
  EXPECT_EQ(wl::hfShapeType(as_llama), wl::hfShapeType(v03));
  // A Qwen2 without a window stays qwen2; a trainscope workload file without model_type keeps its shape's type.
  EXPECT_EQ(wl::hfModelType(wl::load("qwen2.5-7b")), "qwen2");
  EXPECT_EQ(wl::hfModelType(wl::load("tiny-llama")), "llama");
}

TEST(ArchitectureAudit, MegatronsWindowUnderCpNeedsHeadsTheCpRanksSplit) {
  // Transformer Engine's a2a exchange (the one that applies a window under CP) scatters each TP rank's
  // q and K/V heads over the cp ranks: 6 q / 3 K/V heads do not split over 2 ranks. It was exported.
  std::string six = with(as("mistral", kLlama), R"("sliding_window": 16)");
  six.replace(six.find(R"("num_attention_heads": 4, "num_key_value_heads": 2)"), 50,
              R"("num_attention_heads": 6, "num_key_value_heads": 3)");
  six.replace(six.find(R"("hidden_size": 64)"), 17, R"("hidden_size": 96)");
  const wl::Workload w = wl::parse(six, "six.json");
  try {
    megatronFlags(w, 2);
    ADD_FAILURE() << "exported a window under cp 2 with 3 K/V heads";
  } catch (const ts::UserError& e) {
    EXPECT_EQ(e.field(), "--cp") << e.what();
    EXPECT_NE(std::string(e.what()).find("--cp-comm-type a2a"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("pass --cp 3"), std::string::npos) << e.what();
  }
  EXPECT_NE(megatronFlags(w, 3).find(" --cp-comm-type a2a"), std::string::npos);  // 6 and 3 split over 3
  tn::Plan p = trainscope::models::planOf(runOf(w, 2));
  EXPECT_EQ(tn::frameworkRefusal(tn::Framework::Megatron, p, w).flag, "--cp");
  EXPECT_EQ(tn::frameworkRefusal(tn::Framework::Trainscope, p, w).flag, "");  // the ring has no such bound
  p.cp = 3;
  EXPECT_EQ(tn::frameworkRefusal(tn::Framework::Megatron, p, w).flag, "");
  // Without a window the ring-free exchange is not used: no bound.
  EXPECT_EQ(tn::frameworkRefusal(tn::Framework::Megatron, trainscope::models::planOf(runOf(wl::parse(kLlama, "l.json"), 3)),
                                 wl::parse(kLlama, "l.json")).flag, "");
}
