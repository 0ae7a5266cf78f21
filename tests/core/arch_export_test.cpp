// arch_export_test.cpp — the architecture in the exports (issue 32): the Hugging Face config.json
// written for a workload reads back as the same model; Megatron-LM's flags say the norm, MLP,
// positions, grouped-query attention, biases and head; DeepSpeed / Accelerate / TrainingArguments
// carry the config.json; the tuner's space respects GQA under TP; the demo's small-llama preset.
// The targets' own parsers read the same exports in bench/check_exports.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "../common/flags_of.h"
#include "../common/cli.h"
#include "trainscope/common/error.h"
#include "trainscope/tuner/export.h"
#include "trainscope/tuner/space.h"
#include "trainscope/workloads/hf_config.h"
#include "trainscope/workloads/workload.h"

namespace rt = trainscope::runconfig;
namespace tn = trainscope::tuner;
namespace wl = trainscope::workloads;

namespace {

// A resolved layout of small-cpu (4 heads, 4 layers) with `workload` as its model: the exports read
// the layout and the model only (the runtime's resolve refuses Llama-family models until it trains them).
rt::TrainConfig withModel(const wl::Workload& w, int64_t tp = 1, int64_t pp = 1, int nproc = 1,
                          rt::ZeroStage zero = rt::ZeroStage::None) {
  rt::TrainConfig c;
  c.workload = "small-cpu";
  c.seq = 64, c.mbs = 1, c.gbs = 8, c.nproc = nproc, c.tp = tp, c.pp = pp, c.zero = zero;
  c = tn::trainingRunOf(c);
  c.model = w;
  c.workload = w.name;
  return c;
}
rt::TrainConfig withModel(const std::string& name, int64_t tp = 1, int64_t pp = 1, int nproc = 1) {
  return withModel(wl::load(name), tp, pp, nproc);
}

using trainscope::testing::flagsOf;

std::string joined(const std::vector<std::string>& notes) {
  std::string s;
  for (const auto& n : notes) s += n + "\n";
  return s;
}

void expectSameModel(const wl::Workload& a, const wl::Workload& b, const std::string& what) {
  EXPECT_EQ(a.n_layer, b.n_layer) << what;
  EXPECT_EQ(a.n_head, b.n_head) << what;
  EXPECT_EQ(a.n_embd, b.n_embd) << what;
  EXPECT_EQ(a.n_positions, b.n_positions) << what;
  EXPECT_EQ(a.vocab_size, b.vocab_size) << what;
  EXPECT_EQ(a.norm, b.norm) << what;
  EXPECT_DOUBLE_EQ(a.norm_eps, b.norm_eps) << what;
  EXPECT_EQ(a.qkv_bias, b.qkv_bias) << what;
  EXPECT_EQ(a.proj_bias, b.proj_bias) << what;
  EXPECT_EQ(a.mlp_bias, b.mlp_bias) << what;
  EXPECT_EQ(a.positions, b.positions) << what;
  if (a.positions == wl::Positions::Rope) EXPECT_DOUBLE_EQ(a.rope_theta, b.rope_theta) << what;
  EXPECT_DOUBLE_EQ(a.rope_scaling.factor, b.rope_scaling.factor) << what;
  EXPECT_DOUBLE_EQ(a.rope_scaling.low_freq_factor, b.rope_scaling.low_freq_factor) << what;
  EXPECT_DOUBLE_EQ(a.rope_scaling.high_freq_factor, b.rope_scaling.high_freq_factor) << what;
  EXPECT_EQ(a.rope_scaling.original_max_position_embeddings, b.rope_scaling.original_max_position_embeddings) << what;
  EXPECT_EQ(a.mlp, b.mlp) << what;
  EXPECT_EQ(a.kvHeads(), b.kvHeads()) << what;
  EXPECT_EQ(a.headSize(), b.headSize()) << what;
  EXPECT_EQ(a.tie_embeddings, b.tie_embeddings) << what;
  EXPECT_EQ(a.sliding_window, b.sliding_window) << what;
  EXPECT_EQ(a.window_from_layer, b.window_from_layer) << what;
  EXPECT_EQ(a.n_experts, b.n_experts) << what;
  if (a.isMoe()) {
    EXPECT_EQ(a.top_k, b.top_k) << what;
    EXPECT_EQ(a.expertHidden(), b.expertHidden()) << what;
    EXPECT_DOUBLE_EQ(a.aux_loss_coeff, b.aux_loss_coeff) << what;
    EXPECT_EQ(a.shared_expert, b.shared_expert) << what;
    EXPECT_EQ(a.sharedExpertHidden(), b.sharedExpertHidden()) << what;
    EXPECT_EQ(a.shared_expert_gate, b.shared_expert_gate) << what;
    EXPECT_EQ(a.renormalisesGates(), b.renormalisesGates()) << what;
    for (int64_t l = 0; l < a.n_layer; ++l) EXPECT_EQ(a.moeLayer(l), b.moeLayer(l)) << what << " layer " << l;
    if (a.moeLayers() < a.n_layer) EXPECT_EQ(a.ffnHidden(), b.ffnHidden()) << what;
  } else {
    EXPECT_EQ(a.ffnHidden(), b.ffnHidden()) << what;
  }
  EXPECT_EQ(a.parameterCount(), b.parameterCount()) << what;
  EXPECT_EQ(a.activeParameterCount(), b.activeParameterCount()) << what;
}

}  // namespace

TEST(HfConfig, EveryPresetReadsBackAsTheSameModel) {
  const std::map<std::string, std::string> type = {
      {"tiny", "gpt2"},          {"gpt2-124m", "gpt2"},        {"small-cpu", "gpt2"},
      {"tiny-llama", "llama"},   {"small-llama", "llama"},     {"llama3-8b", "llama"},
      {"llama3-70b", "llama"},   {"llama3.1-405b", "llama"},   {"qwen2.5-7b", "qwen2"},
      {"tiny-mixtral", "mixtral"}, {"mixtral-8x7b", "mixtral"},
      {"tiny-qwen2-moe", "qwen2_moe"}, {"qwen1.5-moe-a2.7b", "qwen2_moe"},
      // Mistral 7B v0.3 has no sliding window: the same model as a Llama without biases, kept as mistral.
      {"mistral-7b", "mistral"}};
  for (const auto& [name, model_type] : type) {
    const wl::Workload w = wl::load(name);
    const std::string text = wl::hfConfigJson(w, "--format");
    const auto j = nlohmann::json::parse(text);
    EXPECT_EQ(j["model_type"], model_type) << name;
    EXPECT_EQ(wl::hfModelType(w), model_type) << name;
    const wl::Workload back = wl::parse(text, "/exports/" + name + "/config.json");
    expectSameModel(w, back, name);
    EXPECT_TRUE(back.notes.empty()) << name << ": " << joined(back.notes);  // no dropout, nothing ignored
  }
  // GPT-2's end-of-text token, the vocabulary's last (50256), in any vocabulary.
  EXPECT_EQ(nlohmann::json::parse(wl::hfConfigJson(wl::load("gpt2-124m"), "--format"))["eos_token_id"], 50256);
  EXPECT_EQ(nlohmann::json::parse(wl::hfConfigJson(wl::load("tiny"), "--format"))["eos_token_id"], wl::load("tiny").vocab_size - 1);
  // A Hub config's token ids are written back as they are (SmolLM2's 0; Llama 3.1's list of end
  // tokens), not dropped for LlamaConfig's defaults 1 and 2; a null pad_token_id stays unset.
  const wl::Workload hub = wl::parse(
      R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 96, "max_position_embeddings": 32,
          "bos_token_id": 0, "eos_token_id": [0, 2], "pad_token_id": null})",
      "/hub/config.json");
  const auto hub_json = nlohmann::json::parse(wl::hfConfigJson(hub, "--save"));
  EXPECT_EQ(hub_json["bos_token_id"], 0);
  EXPECT_EQ(hub_json["eos_token_id"], nlohmann::json::array({0, 2}));
  EXPECT_FALSE(hub_json.contains("pad_token_id"));
  EXPECT_EQ(wl::parse(hub_json.dump(), "/saved/config.json").hf_token_ids, hub.hf_token_ids);  // and again
  // A window shorter than the positions: Mistral v0.1's, written as model_type mistral.
  wl::Workload m = wl::load("mistral-7b");
  m.sliding_window = 4096;
  EXPECT_EQ(wl::hfModelType(m), "mistral");
  EXPECT_EQ(nlohmann::json::parse(wl::hfConfigJson(m, "--format"))["sliding_window"], 4096);
  expectSameModel(m, wl::parse(wl::hfConfigJson(m, "--format"), "/x/config.json"), "mistral window");
  // Llama 3.1's RoPE scaling, in the file.
  const auto j = nlohmann::json::parse(wl::hfConfigJson(wl::load("llama3.1-405b"), "--format"));
  // transformers 4's rope_scaling, or 5's rope_parameters (both read back by parse and by transformers 5).
  const auto& rope = j.contains("rope_scaling") && !j["rope_scaling"].is_null() ? j["rope_scaling"] : j["rope_parameters"];
  EXPECT_EQ(rope["rope_type"], "llama3");
  EXPECT_EQ(rope["factor"], 8.0);
  EXPECT_EQ(j["num_key_value_heads"], 8);
  EXPECT_EQ(j["intermediate_size"], 53248);
}

TEST(HfConfig, ShapesNoTransformersModelBuildsAreRefusedNamingWhy) {
  auto refusal = [](const wl::Workload& w) {
    try {
      wl::hfConfigJson(w, "--format");
    } catch (const trainscope::UserError& e) {
      EXPECT_EQ(e.field(), "--format");
      EXPECT_NE(std::string(e.what()).find("Hugging Face config.json"), std::string::npos) << e.what();
      EXPECT_TRUE(wl::hfModelType(w).empty());
      EXPECT_FALSE(wl::hfUnsupported(w).empty());
      return std::string(e.what());
    }
    return std::string("not refused");
  };
  EXPECT_NE(refusal(wl::load("tiny-moe")), "not refused");  // GELU experts
  // ALiBi: no transformers model computes it as trainscope does (BLOOM's embedding LayerNorm, MPT's
  // erf GELU and bias-free norms, Falcon's bias over sqrt(head_dim)), in GPT-2's shape or Llama's.
  for (const char* base : {"tiny", "tiny-llama"}) {
    wl::Workload a = wl::load(base);
    a.positions = wl::Positions::Alibi;
    const std::string why = refusal(a);
    for (const char* word : {"positions alibi", "BLOOM", "MPT", "Falcon", "sqrt(head_dim)"})
      EXPECT_NE(why.find(word), std::string::npos) << base << ": " << why;
  }
  wl::Workload w = wl::load("tiny-llama");
  w.qkv_bias = true;  // q/k/v biases with an MLP bias: neither Llama's attention_bias nor Qwen2's
  w.mlp_bias = true;
  EXPECT_NE(refusal(w).find("q"), std::string::npos) << refusal(w);
  w = wl::load("tiny-mixtral");
  w.shared_expert = true;
  EXPECT_NE(refusal(w).find("shared expert"), std::string::npos) << refusal(w);
  // Qwen2-MoE's shape otherwise: gated shared expert, drop-less; Mixtral has experts in every layer
  // and renormalises its gates.
  w = wl::load("tiny-qwen2-moe");
  w.shared_expert_gate = false;
  EXPECT_NE(refusal(w).find("shared_expert_gate"), std::string::npos) << refusal(w);
  w = wl::load("tiny-mixtral");
  w.moe_every = 2;
  EXPECT_NE(refusal(w).find("Mixtral has experts in every layer"), std::string::npos) << refusal(w);
  // Qwen2-MoE's dense layers are its mlp_only_layers (decoder_sparse_step 1): moe_every 2 and a pattern travel.
  w = wl::load("tiny-qwen2-moe");
  w.moe_every = 2;
  EXPECT_EQ(nlohmann::json::parse(wl::hfConfigJson(w, "--format"))["mlp_only_layers"], nlohmann::json::array({1}));
  expectSameModel(w, wl::parse(wl::hfConfigJson(w, "--format"), "/x/config.json"), "qwen2_moe moe_every 2");
  w = wl::load("tiny-qwen2-moe");
  w.moe_pattern = {0, 1};
  EXPECT_EQ(nlohmann::json::parse(wl::hfConfigJson(w, "--format"))["mlp_only_layers"], nlohmann::json::array({0}));
  expectSameModel(w, wl::parse(wl::hfConfigJson(w, "--format"), "/x/config.json"), "qwen2_moe pattern [0, 1]");
  w = wl::load("tiny-qwen2-moe");
  w.mlp_bias = true;
  EXPECT_NE(refusal(w).find("Qwen2-MoE's linears"), std::string::npos) << refusal(w);
  w = wl::load("tiny-mixtral");
  w.norm_topk_prob = 0;
  EXPECT_NE(refusal(w).find("norm_topk_prob"), std::string::npos) << refusal(w);
  // Qwen2-MoE's q/k/v biases are its qkv_bias: off travels too.
  w = wl::load("tiny-qwen2-moe");
  w.qkv_bias = false;
  EXPECT_EQ(nlohmann::json::parse(wl::hfConfigJson(w, "--format"))["qkv_bias"], false);
  expectSameModel(w, wl::parse(wl::hfConfigJson(w, "--format"), "/x/config.json"), "qwen2_moe without biases");
  // Llama with biases everywhere is attention_bias and mlp_bias.
  w = wl::load("tiny-llama");
  w.qkv_bias = w.proj_bias = w.mlp_bias = true;
  const auto j = nlohmann::json::parse(wl::hfConfigJson(w, "--format"));
  EXPECT_EQ(j["attention_bias"], true);
  EXPECT_EQ(j["mlp_bias"], true);
  expectSameModel(w, wl::parse(wl::hfConfigJson(w, "--format"), "/x/config.json"), "llama with biases");
}

TEST(ArchExport, MegatronSaysTinyLlamasArchitecture) {
  const auto e = tn::exportConfig(withModel("tiny-llama"), tn::ExportFormat::Megatron);
  const auto f = flagsOf(e.text);
  EXPECT_EQ(f.at("--hidden-size"), "64");
  EXPECT_EQ(f.at("--num-attention-heads"), "4");
  EXPECT_EQ(f.at("--normalization"), "RMSNorm");
  EXPECT_EQ(f.at("--norm-epsilon"), "1e-05");
  EXPECT_EQ(f.at("--swiglu"), "");
  EXPECT_EQ(f.at("--ffn-hidden-size"), "176");
  EXPECT_EQ(f.at("--position-embedding-type"), "rope");
  EXPECT_EQ(f.at("--rotary-base"), "10000");
  EXPECT_EQ(f.at("--rotary-percent"), "1.0");
  EXPECT_EQ(f.at("--group-query-attention"), "");
  EXPECT_EQ(f.at("--num-query-groups"), "2");
  EXPECT_EQ(f.at("--untie-embeddings-and-output-weights"), "");
  EXPECT_EQ(f.at("--disable-bias-linear"), "");
  EXPECT_EQ(f.at("--max-position-embeddings"), "128");
  EXPECT_EQ(f.at("--vocab-size"), "256");
  for (const char* absent : {"--add-qkv-bias", "--kv-channels", "--use-rope-scaling", "--num-experts"})
    EXPECT_FALSE(f.count(absent)) << absent;
  EXPECT_EQ(joined(e.notes), "");
}

TEST(ArchExport, MegatronSaysQwenLlama31AndMixtral) {
  auto f = flagsOf(tn::exportConfig(withModel("qwen2.5-7b"), tn::ExportFormat::Megatron).text);
  EXPECT_EQ(f.at("--disable-bias-linear"), "");
  EXPECT_EQ(f.at("--add-qkv-bias"), "");  // Qwen2: biases on q, k, v only
  EXPECT_EQ(f.at("--rotary-base"), "1000000");
  EXPECT_EQ(f.at("--num-query-groups"), "4");
  EXPECT_EQ(f.at("--norm-epsilon"), "1e-06");
  EXPECT_EQ(f.at("--ffn-hidden-size"), "18944");
  f = flagsOf(tn::exportConfig(withModel("llama3.1-405b"), tn::ExportFormat::Megatron).text);
  EXPECT_EQ(f.at("--use-rope-scaling"), "");
  EXPECT_EQ(f.at("--rope-scaling-factor"), "8");
  EXPECT_EQ(f.at("--rotary-base"), "500000");
  EXPECT_EQ(f.at("--num-query-groups"), "8");
  EXPECT_EQ(f.at("--ffn-hidden-size"), "53248");
  EXPECT_EQ(f.at("--num-attention-heads"), "128");
  const auto mix = tn::exportConfig(withModel("mixtral-8x7b"), tn::ExportFormat::Megatron);
  f = flagsOf(mix.text);
  EXPECT_EQ(f.at("--num-experts"), "8");
  EXPECT_EQ(f.at("--moe-router-topk"), "2");
  EXPECT_EQ(f.at("--moe-ffn-hidden-size"), "14336");
  EXPECT_EQ(f.at("--moe-layer-freq"), "1");
  EXPECT_EQ(f.at("--moe-aux-loss-coeff"), "0.02");
  EXPECT_EQ(f.at("--swiglu"), "");  // SwiGLU experts
  EXPECT_EQ(f.at("--disable-bias-linear"), "");
  EXPECT_EQ(f.at("--num-query-groups"), "8");
  EXPECT_EQ(f.at("--rotary-base"), "1000000");
  EXPECT_FALSE(f.count("--moe-expert-capacity-factor"));  // drop-less
  EXPECT_FALSE(f.count("--moe-router-pre-softmax"));       // renormalised: Megatron-LM's softmax over the top k
  EXPECT_FALSE(f.count("--moe-shared-expert-gate"));
  // Qwen1.5-MoE: top-4 of the whole softmax (not renormalised), a gated shared expert of its own width.
  const auto qm = flagsOf(tn::exportConfig(withModel("qwen1.5-moe-a2.7b"), tn::ExportFormat::Megatron).text);
  EXPECT_EQ(qm.at("--num-experts"), "60");
  EXPECT_EQ(qm.at("--moe-router-topk"), "4");
  EXPECT_EQ(qm.at("--moe-ffn-hidden-size"), "1408");
  EXPECT_EQ(qm.at("--moe-shared-expert-intermediate-size"), "5632");
  EXPECT_EQ(qm.at("--moe-shared-expert-gate"), "");
  EXPECT_EQ(qm.at("--moe-router-pre-softmax"), "");
  EXPECT_EQ(qm.at("--add-qkv-bias"), "");
  // DeepSpeed-MoE's experts are set in the model code: the note names SwiGLU experts without biases.
  const auto ds = tn::exportConfig(withModel("tiny-mixtral", 1, 1, 2), tn::ExportFormat::DeepSpeed);
  EXPECT_NE(joined(ds.notes).find("expert=<a 64->128->64 SwiGLU MLP without biases>"), std::string::npos)
      << joined(ds.notes);
  // GPT-2: LayerNorm, learned positions, 4h GELU, biases, tied: no architecture switches.
  f = flagsOf(tn::exportConfig(withModel("small-cpu"), tn::ExportFormat::Megatron).text);
  EXPECT_EQ(f.at("--normalization"), "LayerNorm");
  EXPECT_EQ(f.at("--position-embedding-type"), "learned_absolute");
  EXPECT_EQ(f.at("--ffn-hidden-size"), "1024");
  for (const char* absent : {"--swiglu", "--group-query-attention", "--untie-embeddings-and-output-weights",
                             "--disable-bias-linear", "--rotary-base", "--kv-channels"})
    EXPECT_FALSE(f.count(absent)) << absent;
}

TEST(ArchExport, MegatronHeadDimTpBeyondKvHeadsAndWhatItCannotSay) {
  wl::Workload w = wl::load("tiny-llama");
  w.head_dim = 32;  // q: 4 x 32 = 128 wide on a 64 hidden
  auto e = tn::exportConfig(withModel(w), tn::ExportFormat::Megatron);
  EXPECT_EQ(flagsOf(e.text).at("--kv-channels"), "32");
  // tp 4 over 2 K/V heads: replicated, as megatron-core's attention does; no note.
  e = tn::exportConfig(withModel("tiny-llama", 4, 1, 4), tn::ExportFormat::Megatron);
  EXPECT_EQ(flagsOf(e.text).at("--tensor-model-parallel-size"), "4");
  EXPECT_EQ(flagsOf(e.text).at("--num-query-groups"), "2");
  EXPECT_EQ(joined(e.notes).find("query"), std::string::npos) << joined(e.notes);
  // Llama's attention_bias without mlp_bias: Megatron-LM has no flag for it.
  w = wl::load("tiny-llama");
  w.qkv_bias = w.proj_bias = true;
  e = tn::exportConfig(withModel(w), tn::ExportFormat::Megatron);
  EXPECT_NE(joined(e.notes).find("has no flag"), std::string::npos) << joined(e.notes);
  EXPECT_FALSE(flagsOf(e.text).count("--disable-bias-linear"));
  // A non-integer RoPE base and Llama 3 scaling constants Megatron-LM does not take.
  w = wl::load("llama3.1-405b");
  w.rope_theta = 10000.5;
  w.rope_scaling.high_freq_factor = 2;
  e = tn::exportConfig(withModel(w), tn::ExportFormat::Megatron);
  EXPECT_EQ(flagsOf(e.text).at("--rotary-base"), "10001");
  EXPECT_NE(joined(e.notes).find("rounded to 10001"), std::string::npos) << joined(e.notes);
  EXPECT_NE(joined(e.notes).find("high_freq_factor 4"), std::string::npos) << joined(e.notes);
  w = wl::load("tiny-llama");
  w.positions = wl::Positions::Alibi;
  e = tn::exportConfig(withModel(w), tn::ExportFormat::Megatron);
  EXPECT_NE(joined(e.notes).find("no ALiBi"), std::string::npos);
}

TEST(ArchExport, DeepSpeedAccelerateAndTrainingArgsCarryTheModelsConfigJson) {
  const rt::TrainConfig c = withModel(wl::load("tiny-llama"), 1, 1, 2, rt::ZeroStage::Parameters);
  const std::string config = wl::hfConfigJson(c.model, "--format");
  for (tn::ExportFormat f : {tn::ExportFormat::DeepSpeed, tn::ExportFormat::AccelerateConfig,
                             tn::ExportFormat::TrainingArgs, tn::ExportFormat::Accelerate}) {
    const auto e = tn::exportConfig(c, f, {true});
    ASSERT_EQ(e.files.size(), 1u);
    EXPECT_EQ(e.files[0].name, "config.json");
    EXPECT_EQ(e.files[0].text, config);
  }
  EXPECT_EQ(tn::exportConfig(c, tn::ExportFormat::HfConfig).text, config);
  EXPECT_TRUE(tn::exportConfig(c, tn::ExportFormat::Megatron).files.empty());  // its flags carry the model
  EXPECT_EQ(tn::parseExportFormat("hf-config"), tn::ExportFormat::HfConfig);
  // FSDP wraps the model's own block.
  const std::string yaml = tn::exportConfig(c, tn::ExportFormat::AccelerateConfig, {false}).text;
  EXPECT_NE(yaml.find("  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer\n"), std::string::npos) << yaml;
  const auto args = nlohmann::json::parse(tn::exportConfig(c, tn::ExportFormat::TrainingArgs).text);
  EXPECT_EQ(args["fsdp_config"]["transformer_layer_cls_to_wrap"], nlohmann::json::array({"LlamaDecoderLayer"}));
  // A GPT-style mixture of experts has no Transformers model: no file, a note naming why.
  const auto moe = tn::exportConfig(withModel("tiny-moe", 1, 1, 2), tn::ExportFormat::DeepSpeed);
  EXPECT_TRUE(moe.files.empty());
  EXPECT_NE(joined(moe.notes).find("no config.json is written beside this export: transformers has no model of "
                                    "workload tiny-moe's shape"), std::string::npos) << joined(moe.notes);
}

// Grouped-query attention under TP: tp must divide n_kv_head, or be a multiple of it (K/V replicated),
// and divide n_head. 12 query heads over 6 K/V heads on 4 ranks: tp 1, 2 split the K/V heads (6/2 = 3
// per rank); tp 4 divides 12 query heads but splits a 2-head query group's K/V head: refused. 4 over 2
// (tiny-llama): tp 4 replicates each K/V head on 2 ranks: allowed.
TEST(ArchSpace, TensorParallelismRespectsGroupedQueryAttention) {
  tn::Cluster cl = tn::loadCluster("cpu-local");
  cl.devices_per_node = 4;
  tn::SpaceOptions o;
  o.gbs = 8, o.seq = 32, o.mbs = {1}, o.ckpt = {rt::Checkpointing::None}, o.cp = {1}, o.virtual_stages = {1};
  o.zero = {rt::ZeroStage::None}, o.sequence_parallel = {false}, o.worlds = {4};
  o.schedules = {rt::PipelineSchedule::OneFOneB};
  wl::Workload w = wl::load("tiny-llama");
  w.n_head = 12, w.n_kv_head = 6, w.n_embd = 96;
  std::map<int64_t, int> refused_for_gqa, seen;
  for (const auto& cand : tn::enumerateSpace(w, cl, o)) {
    ++seen[cand.plan.tp];
    if (cand.rejected.find("neither divides n_kv_head=6") != std::string::npos) ++refused_for_gqa[cand.plan.tp];
  }
  EXPECT_EQ(seen.size(), 3u);  // tp 1, 2, 4
  EXPECT_EQ(refused_for_gqa[1], 0);
  EXPECT_EQ(refused_for_gqa[2], 0);
  EXPECT_EQ(refused_for_gqa[4], seen[4]);
  EXPECT_GT(seen[4], 0);
  for (const auto& cand : tn::enumerateSpace(wl::load("tiny-llama"), cl, o)) {
    EXPECT_EQ(cand.rejected.find("neither divides n_kv_head"), std::string::npos) << cand.plan.describe();
  }
  // n_head must still divide: 6 query heads (3 groups of 2) on tp 4.
  w.n_head = 6, w.n_kv_head = 3, w.n_embd = 96;
  for (const auto& cand : tn::enumerateSpace(w, cl, o))
    if (cand.plan.tp == 4) EXPECT_NE(cand.rejected.find("does not divide n_head=6"), std::string::npos) << cand.rejected;
}

// The demo's Llama: small-cpu's size (4 layers, 256 hidden, vocab 4096) in the Llama architecture.
// 2 x 4096 x 256 (untied) + 4 x (2 x 256 + 256 x (256 + 2 x 128) + 256 x 256 + 3 x 256 x 688) + 256.
TEST(ArchSpace, SmallLlamaPreset) {
  const wl::Workload w = wl::load("small-llama");
  EXPECT_EQ(w.parameterCount(), 4999424);
  EXPECT_EQ(w.kvHeads(), 2);
  EXPECT_EQ(w.headSize(), 64);
  EXPECT_EQ(w.ffnHidden(), 688);
  EXPECT_FALSE(w.tie_embeddings);
  EXPECT_EQ(w.norm, wl::Norm::RMSNorm);
  EXPECT_EQ(w.positions, wl::Positions::Rope);
  const wl::Workload gpt = wl::load("small-cpu");
  EXPECT_EQ(w.n_layer, gpt.n_layer);
  EXPECT_EQ(w.n_embd, gpt.n_embd);
  EXPECT_EQ(w.vocab_size, gpt.vocab_size);
  EXPECT_EQ(w.n_positions, gpt.n_positions);
}

// An export is for its study's machines: a layout of more ranks than this host's cores allow a local
// run (4 per core) is exported as it is (before, every format of a two-node study was refused here
// naming --nproc and this machine's cores), and --oversubscribe is not written into it.
TEST(ArchExport, AClusterLayoutIsExportedWhateverThisHostsCores) {
  rt::TrainConfig c;
  c.workload = "small-cpu";
  c.seq = 64, c.mbs = 1, c.gbs = 4096, c.nproc = 4096;
  ASSERT_NO_THROW(c = tn::trainingRunOf(c));
  EXPECT_EQ(c.dp, 4096);
  EXPECT_FALSE(c.oversubscribe);
  EXPECT_EQ(tn::exportConfig(c, tn::ExportFormat::Run).text.find("oversubscribe\": true"), std::string::npos);
}

// `trainscope export -o FILE` writes the model's config.json beside FILE: a second export into the
// same folder replaces the identical file without --overwrite; a different config.json there is
// never replaced (and nothing is written); -o naming config.json itself is refused.
TEST(ArchExport, ExportWritesTheConfigJsonBesideItsFileAndNeverOverAnotherOne) {
  namespace ts = trainscope::testing;
  const std::string dir = ts::tempPath("arch-export");
  std::filesystem::create_directories(dir + "/other");
  std::filesystem::create_directories(dir + "/fresh");
  const std::string study = dir + "/s.db";
  auto r = ts::cli("tune --workload tiny --gbs 8 --max-trials 1 --study '" + study + "'");
  ASSERT_EQ(r.status, 0) << r.output;
  r = ts::cli("export '" + study + "' --format deepspeed -o '" + dir + "/ds.json'");
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream in(dir + "/config.json");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(nlohmann::json::parse(text.str())["model_type"], "gpt2");
  EXPECT_EQ(wl::parse(text.str(), dir + "/config.json").parameterCount(), wl::load("tiny").parameterCount());
  r = ts::cli("export '" + study + "' --format training-args -o '" + dir + "/ta.json'");
  EXPECT_EQ(r.status, 0) << r.output;
  std::ofstream(dir + "/other/config.json") << "mine\n";
  r = ts::cli("export '" + study + "' --format accelerate-config -o '" + dir + "/other/a.yaml'");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("-o: " + dir + "/other/config.json already exists and is not an earlier config.json"),
            std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/other/a.yaml"));
  std::ifstream mine(dir + "/other/config.json");
  std::string line;
  std::getline(mine, line);
  EXPECT_EQ(line, "mine");
  r = ts::cli("export '" + study + "' --format deepspeed -o '" + dir + "/fresh/config.json'");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("is where this export writes the model's config.json"), std::string::npos) << r.output;
  r = ts::cli("export '" + study + "' --format deepspeed");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("note: the model's config.json belongs beside this export"), std::string::npos) << r.output;
}

// Qwen2-MoE without experts (num_experts 0, or every layer in mlp_only_layers): transformers builds
// every MLP as a dense Qwen2MoeMLP — Qwen2's shape and names. The export keeps model_type qwen2_moe
// with num_experts 0 (it wrote qwen2, or llama without qkv_bias: a type the config did not say).
TEST(HfConfig, Qwen2MoeWithoutExpertsKeepsItsType) {
  const std::string base = R"({"model_type": "qwen2_moe", "hidden_size": 64, "intermediate_size": 176,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
    "max_position_embeddings": 128, "num_experts_per_tok": 2, "moe_intermediate_size": 96,
    "shared_expert_intermediate_size": 160, )";
  // transformers 5: sum(p.numel()) of Qwen2MoeForCausalLM(Qwen2MoeConfig(num_experts=0, ...)), the same
  // as Qwen2ForCausalLM's of those sizes (218,176), and 217,664 under qkv_bias false.
  const std::pair<std::string, int64_t> cases[] = {{R"("num_experts": 0})", 218176},
                                                   {R"("num_experts": 4, "mlp_only_layers": [0, 1, 2, 3]})", 218176},
                                                   {R"("num_experts": 0, "qkv_bias": false})", 217664}};
  for (const auto& [tail, params] : cases) {
    const wl::Workload w = wl::parse(base + tail, "q.json");
    ASSERT_FALSE(w.isMoe()) << tail;
    EXPECT_EQ(w.parameterCount(), params) << tail;
    EXPECT_EQ(wl::hfModelType(w), "qwen2_moe") << tail;
    const auto j = nlohmann::json::parse(wl::hfConfigJson(w, "--save"));
    EXPECT_EQ(j["model_type"], "qwen2_moe") << j.dump();
    EXPECT_EQ(j["architectures"][0], "Qwen2MoeForCausalLM");
    EXPECT_EQ(j["num_experts"], 0);
    EXPECT_EQ(j["intermediate_size"], 176);  // the dense layers' width
    EXPECT_EQ(j["qkv_bias"], w.qkv_bias);
    EXPECT_EQ(j["use_sliding_window"], false);
    // Read back: the same model, the same type again.
    const wl::Workload back = wl::parse(j.dump(), "back.json");
    EXPECT_EQ(back.parameterCount(), params) << j.dump();
    EXPECT_EQ(wl::hfShapeType(back), wl::hfShapeType(w));
    EXPECT_EQ(wl::hfModelType(back), "qwen2_moe");
  }
  // A Qwen2 config stays qwen2; a Qwen2-MoE with experts stays what it was.
  const std::string qwen2 = R"({"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 176,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
    "max_position_embeddings": 128})";
  EXPECT_EQ(wl::hfModelType(wl::parse(qwen2, "q2.json")), "qwen2");
  const wl::Workload moe = wl::parse(base + R"("num_experts": 4})", "q.json");
  EXPECT_EQ(nlohmann::json::parse(wl::hfConfigJson(moe, "--save"))["num_experts"], 4);
}
