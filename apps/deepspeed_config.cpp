// deepspeed_config.cpp — see deepspeed_config.h. Keys and defaults: deepspeed 0.19.8
// runtime/zero/config.py (DeepSpeedZeroConfig, extra="forbid": an unknown key is refused; stage 0;
// reduce_bucket_size 5e8 > 0, allgather_bucket_size 5e8, stage3_prefetch_bucket_size 5e7,
// stage3_max_live_parameters 1e9, stage3_param_persistence_threshold 1e5, all >= 0, each also taken by
// its field name without "stage3_"; overlap_comm None → stage == 3 (overlap_comm_valid);
// contiguous_gradients true), runtime/zero/offload_config.py (device "none", "cpu" or "nvme"; "none" by
// default), runtime/config.py (get_communication_data_type: fp32, fp16 or bf16, lower-cased; none: the
// model's; "bfloat16 and fp16 modes cannot be simultaneously enabled"; the batch keys).
#include "deepspeed_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/json_text.h"

namespace trainscope::apps {

namespace {

using nlohmann::json;

// Hugging Face's "auto" for the keys it fills from the model (transformers 5.25
// integrations/deepspeed.py trainer_config_finalize: h², 0.9·h² and 10·h); 0 for any other key.
double autoValue(const std::string& key, const workloads::Workload& w) {
  const double h = double(w.n_embd);
  if (key == "reduce_bucket_size") return h * h;
  if (key == "stage3_prefetch_bucket_size") return std::floor(0.9 * h * h);
  if (key == "stage3_param_persistence_threshold") return 10 * h;
  return 0;
}

// zero_optimization keys that change neither the step's memory nor its time (checkpoint saving and
// loading, warnings, module hooks, and round_robin_gradients, which orders CPU offload's copies only):
// any value is accepted.
const char* const kNoStepEffect[] = {
    "stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
    "stage3_gather_fp16_weights_on_model_save", "load_from_fp32_weights", "elastic_checkpoint",
    "ignore_unused_parameters", "pipeline_loading_checkpoint", "override_module_apply", "log_trace_cache_warnings",
    "save_muon_momentum_buffer_in_memory", "leaf_module", "round_robin_gradients", "cpu_offload_use_pin_memory"};

// zero_optimization keys that change memory or time and are not priced: accepted at DeepSpeed's
// default only (DeepSpeedZeroConfig's), refused otherwise. ZeRO++ (zero_quantized_*, hpZ) and the
// offload keys are refused apart (offloadRefusal) with their own words.
struct DefaultOnly {
  const char* key;
  const char* alias;  // the field's other name ("" none)
  json value;
};
const std::vector<DefaultOnly>& defaultOnly() {
  static const std::vector<DefaultOnly> keys = {
      {"reduce_scatter", "", true}, {"use_multi_rank_bucket_allreduce", "", true},
      {"allgather_partitions", "", true}, {"compute_grad_norm", "", true}, {"zenflow", "", nullptr},
      {"sub_group_size", "", 1e9}, {"stage3_model_persistence_threshold", "model_persistence_threshold", 9223372036854775807.0},
      {"stage3_max_reuse_distance", "max_reuse_distance", 1e9},
      {"stage3_module_granularity_threshold", "module_granularity_threshold", 0},
      {"stage3_use_all_reduce_for_fetch_params", "use_all_reduce_for_fetch_params", false},
      {"stage3_allgather_sequential", "allgather_sequential", false}, {"legacy_stage1", "", false},
      {"parameter_alignment", "", false}, {"memory_efficient_linear", "", true}, {"enable_sanity_checks", "", false},
      {"zero_quantized_weights", "", false}, {"zero_quantized_nontrainable_weights", "", false},
      {"zero_quantized_gradients", "", false}, {"zero_hpz_partition_size", "", 1}};
  return keys;
}

bool sameValue(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  return a == b;
}

// Offload moves the optimizer state (and its Adam step: CPU Adam) or the parameters off the GPU and
// adds the PCIe copies each step: neither is priced, so anything but "none" is refused by key.
void checkOffload(const json& zo, const std::string& at, const std::string& path) {
  const std::string fix_tail = "trainscope prices the job on its GPUs alone (no CPU Adam step, no PCIe or NVMe copies)";
  for (const char* key : {"offload_optimizer", "offload_param"}) {
    if (!zo.contains(key) || zo[key].is_null()) continue;
    const std::string what = std::string(key) == "offload_optimizer" ? "optimizer" : "parameter";
    if (!zo[key].is_object())
      throw UserError(at + key, "is " + jsonText(zo[key]) + " in " + path, "give an object with \"device\": \"none\", \"cpu\" or \"nvme\"");
    const json device = zo[key].value("device", json("none"));
    if (device != "none" && device != "cpu" && device != "nvme")
      throw UserError(at + key + ".device", "is " + jsonText(device) + " in " + path, "DeepSpeed takes \"none\", \"cpu\" or \"nvme\"");
    if (device != "none")
      throw UserError(at + key + ".device", device.get<std::string>() + " in " + path + ": " + what + " offload is not priced",
                      "set \"device\": \"none\" (or drop " + std::string(key) + ") to price the job without offload; " + fix_tail);
  }
  // The deprecated booleans DeepSpeed maps onto them (cpu_offload → offload_optimizer.device cpu,
  // cpu_offload_param → offload_param.device cpu).
  for (const char* key : {"cpu_offload", "cpu_offload_param"}) {
    if (!zo.contains(key) || zo[key].is_null() || zo[key] == false) continue;
    const std::string now = std::string(key) == "cpu_offload" ? "offload_optimizer" : "offload_param";
    throw UserError(at + key, "is " + jsonText(zo[key]) + " in " + path + ": DeepSpeed's old name of " + now +
                                  ".device cpu, and offload is not priced",
                    "drop " + std::string(key) + " to price the job without offload; " + fix_tail);
  }
}

// Every key of zero_optimization not read by readDeepSpeedConfig's loops: accepted when it does not
// change the step, at DeepSpeed's default when it does; an unknown key is refused as DeepSpeed does.
void checkOtherZeroKeys(const json& zo, const std::string& at, const std::string& path) {
  static const char* const kPriced[] = {"stage", "reduce_bucket_size", "allgather_bucket_size",
                                        "stage3_prefetch_bucket_size", "prefetch_bucket_size",
                                        "stage3_max_live_parameters", "max_live_parameters",
                                        "stage3_param_persistence_threshold", "param_persistence_threshold",
                                        "overlap_comm", "contiguous_gradients", "offload_optimizer", "offload_param",
                                        "cpu_offload", "cpu_offload_param"};
  for (const auto& [key, v] : zo.items()) {
    if (std::find(std::begin(kPriced), std::end(kPriced), key) != std::end(kPriced)) continue;
    if (std::find(std::begin(kNoStepEffect), std::end(kNoStepEffect), key) != std::end(kNoStepEffect)) continue;
    const DefaultOnly* d = nullptr;
    for (const DefaultOnly& x : defaultOnly())
      if (key == x.key || key == x.alias) d = &x;
    if (d == nullptr)
      throw UserError(at + key, "is not a key of DeepSpeed's zero_optimization (DeepSpeedZeroConfig refuses unknown keys)",
                      "remove it, or check its spelling");
    if (v.is_null() || sameValue(v, d->value)) continue;
    const bool zeropp = key.rfind("zero_q", 0) == 0 || key == "zero_hpz_partition_size";
    throw UserError(at + key, "is " + jsonText(v) + " in " + path + ": " + (zeropp ? "ZeRO++ (quantized weights or "
                    "gradients, hierarchical partitioning) is" : "a value other than DeepSpeed's default is") + " not priced",
                    "set it to DeepSpeed's default " + jsonText(d->value) + " (or drop it) to price the job without it");
  }
}

// Keys outside zero_optimization that change the step's memory or time and are not priced: refused
// unless DeepSpeed's default (runtime/activation_checkpointing/config.py, constants.py data_types,
// torch_autocast, compile.deepcompile, tensor_parallel.autotp_size, elasticity; Apex "amp" was removed
// and sparse_attention replaces the model's attention). DeepSpeed ignores top-level keys it does not
// know, and so does this reader.
void checkTopLevel(const json& j, const std::string& field, const std::string& path) {
  struct Key {
    const char* section;
    const char* key;  // "" the section itself (refused when present)
    json value;       // DeepSpeed's default
  };
  static const Key kKeys[] = {{"activation_checkpointing", "partition_activations", false},
                              {"activation_checkpointing", "cpu_checkpointing", false},
                              {"activation_checkpointing", "contiguous_memory_optimization", false},
                              {"data_types", "grad_accum_dtype", nullptr},
                              {"torch_autocast", "enabled", false},
                              {"compile", "deepcompile", false},
                              {"tensor_parallel", "autotp_size", 0},
                              {"elasticity", "enabled", false},
                              {"amp", "enabled", false},
                              {"sparse_attention", "", nullptr}};
  for (const Key& k : kKeys) {
    if (!j.contains(k.section) || j[k.section].is_null()) continue;
    const json& sec = j[k.section];
    const std::string name = std::string(k.section) + (*k.key ? std::string(".") + k.key : "");
    const json v = !*k.key ? sec : sec.is_object() ? sec.value(k.key, k.value) : json("not an object");
    if (v.is_null() || sameValue(v, k.value) || (name == "tensor_parallel.autotp_size" && v.is_number() && v.get<double>() <= 1))
      continue;
    throw UserError(field + ": " + name, "is " + jsonText(v) + " in " + path + ": not priced (it changes the step's memory or time)",
                    *k.key ? "set it to DeepSpeed's default " + jsonText(k.value) + " (or drop it) to price the job without it"
                           : "drop it to price the job without it");
  }
}

// A batch key: 0 absent, kDeepSpeedAuto "auto", else a whole number 1 or more.
int64_t batchKey(const json& j, const char* key, const std::string& field, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return 0;
  const json& v = j[key];
  if (v == "auto") return kDeepSpeedAuto;
  if (!v.is_number_integer() || v.get<int64_t>() < 1)
    throw UserError(field + ": " + key, "is " + jsonText(v) + " in " + path, "give a whole number, 1 or more, or \"auto\"");
  return v.get<int64_t>();
}

}  // namespace

DeepSpeedConfigRead readDeepSpeedConfig(const std::string& path, const workloads::Workload& w, int zero,
                                        const std::string& field) {
  const std::string text = files::readTextFile(path, field, "pass DeepSpeed's JSON config (ds_config.json)");
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object()) throw UserError(field, path + " is not a JSON object", "pass DeepSpeed's JSON config (ds_config.json)");
  DeepSpeedConfigRead out;
  out.zero.from_config = true;
  if (j.contains("communication_data_type") && !j["communication_data_type"].is_null()) {
    const json& v = j["communication_data_type"];
    std::string t = v.is_string() ? v.get<std::string>() : "";
    for (char& c : t) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (t != "fp32" && t != "fp16" && t != "bf16")
      throw UserError(field + ": communication_data_type", "is " + jsonText(v) + " in " + path,
                      "DeepSpeed takes \"fp32\", \"fp16\" or \"bf16\"");
    out.reduce_bytes = t == "fp32" ? 4 : 2;
  }
  // What the engine is built with beside ZeRO: the batch keys and the 16-bit mode (checkDeepSpeedPlan
  // compares them with the plan: a file of another batch or dtype is not the job priced).
  out.train_batch = batchKey(j, "train_batch_size", field, path);
  out.micro_batch = batchKey(j, "train_micro_batch_size_per_gpu", field, path);
  out.grad_accum = batchKey(j, "gradient_accumulation_steps", field, path);
  for (const char* mode : {"bf16", "fp16"})
    if (j.contains(mode) && j[mode].is_object() && j[mode].value("enabled", json(false)) == true) {
      if (!out.precision.empty())
        throw UserError(field + ": fp16, bf16", "are both enabled in " + path + ": DeepSpeed itself refuses both at once "
                        "(its config check: \"bfloat16 and fp16 modes cannot be simultaneously enabled\")",
                        "enable one of them");
      out.precision = mode;
    }
  checkTopLevel(j, field, path);
  if (j.contains("optimizer") && j["optimizer"].is_object() && j["optimizer"].contains("type")) {
    const json& t = j["optimizer"]["type"];
    if (!t.is_string()) throw UserError(field + ": optimizer.type", "is " + jsonText(t) + " in " + path, "give DeepSpeed's optimizer name, e.g. \"AdamW\"");
    out.optimizer = t.get<std::string>();
    for (char& c : out.optimizer) c = char(std::tolower(static_cast<unsigned char>(c)));
  }
  if (j.contains("pipeline") && j["pipeline"].is_object() && j["pipeline"].contains("stages") && j["pipeline"]["stages"] != "auto") {
    const json& st = j["pipeline"]["stages"];
    if (!st.is_number_integer() || st.get<int64_t>() < 1)
      throw UserError(field + ": pipeline.stages", "is " + jsonText(st) + " in " + path, "give a whole number, 1 or more, or \"auto\"");
    out.pipeline_stages = st.get<int64_t>();
  }
  const json zo = j.value("zero_optimization", json::object());
  if (!zo.is_object())
    throw UserError(field + ": zero_optimization", "must be an object in " + path, "see DeepSpeed's ZeRO configuration");
  const std::string at = field + ": zero_optimization.";
  struct Count {
    const char* key;
    const char* alias;  // the field's name, which DeepSpeed takes too ("" none)
    double models::DeepSpeedZero::*member;
    bool positive;
  };
  for (const Count& c : {Count{"reduce_bucket_size", "", &models::DeepSpeedZero::reduce_bucket_size, true},
                         Count{"allgather_bucket_size", "", &models::DeepSpeedZero::allgather_bucket_size, false},
                         Count{"stage3_prefetch_bucket_size", "prefetch_bucket_size", &models::DeepSpeedZero::prefetch_bucket_size, false},
                         Count{"stage3_max_live_parameters", "max_live_parameters", &models::DeepSpeedZero::max_live_parameters, false},
                         Count{"stage3_param_persistence_threshold", "param_persistence_threshold",
                               &models::DeepSpeedZero::param_persistence_threshold, false}}) {
    const std::string key = zo.contains(c.key) || !zo.contains(c.alias) ? c.key : c.alias;
    if (!zo.contains(key)) continue;
    const json& v = zo[key];
    double x = NAN;
    if (v.is_number()) x = v.get<double>();
    else if (v == "auto" && autoValue(c.key, w) > 0) x = autoValue(c.key, w);
    if (!std::isfinite(x) || x < 0 || (c.positive && x == 0) || x > 1e15)
      throw UserError(at + key, "is " + jsonText(v) + " in " + path,
                      std::string("give a number of elements") + (c.positive ? " above 0" : ", 0 or more") +
                          (autoValue(c.key, w) > 0 ? " (or \"auto\": the model's hidden size squared, as the Trainer fills it)" : ""));
    out.zero.*c.member = x;
  }
  for (const char* key : {"overlap_comm", "contiguous_gradients"}) {
    if (!zo.contains(key) || zo[key].is_null()) continue;
    if (!zo[key].is_boolean())
      throw UserError(at + key, "is " + jsonText(zo[key]) + " in " + path, "give true or false");
    if (std::string(key) == "overlap_comm") out.zero.overlap_comm = zo[key].get<bool>() ? 1 : 0;
    else out.zero.contiguous_gradients = zo[key].get<bool>();
  }
  checkOffload(zo, at, path);
  checkOtherZeroKeys(zo, at, path);
  // The stage last, so that a bad key is named first. No key: DeepSpeed's default, stage 0.
  const json s = zo.value("stage", json(0));
  if (!s.is_number_integer() || s.get<int64_t>() < 0 || s.get<int64_t>() > 3)
    throw UserError(at + "stage", "is " + jsonText(s) + " in " + path, "DeepSpeed's stages are 0, 1, 2 and 3");
  if (s.get<int64_t>() != zero)
    throw UserError(at + "stage", (zo.contains("stage") ? "is " + jsonText(s) : "is absent (DeepSpeed's default, 0)") + " in " +
                                      path + ", but the plan priced is ZeRO-" + std::to_string(zero),
                    "pass --zero " + jsonText(s) + " (a --batch line: \"zero\"), or the config of the stage priced");
  if (out.zero.overlap_comm < 0) out.zero.overlap_comm = zero == 3 ? 1 : 0;  // DeepSpeed's overlap_comm_valid
  return out;
}

namespace {

// The batch keys against the plan, as DeepSpeed resolves them over its data-parallel world (the plan's
// dp): "auto" is the plan's value (Hugging Face fills it from the Trainer's arguments), a key the file
// leaves out is derived as _set_batch_related_parameters does (gradient_accumulation_steps 1 beside
// one of the other two alone), and what the file says must be the plan's.
void checkBatch(const DeepSpeedConfigRead& ds, const models::Plan& p, const std::string& path, const std::string& field) {
  const int64_t dp = p.dp, ga = p.ga();
  const std::string on = " in " + path + ", but the plan priced ";
  const std::string batch_line = " (a --batch line: \"gbs\")";
  auto n = [](int64_t v) { return std::to_string(v); };
  const int64_t tb = ds.train_batch, mb = ds.micro_batch, acc = ds.grad_accum;
  if (mb > 0 && mb != p.mbs)
    throw UserError(field + ": train_micro_batch_size_per_gpu", "is " + n(mb) + on + "has --mbs " + n(p.mbs),
                    "pass --mbs " + n(mb) + " (a --batch line: \"mbs\"), or the config of the plan priced");
  if (acc != 0 && tb == 0 && mb == 0)
    throw UserError(field + ": gradient_accumulation_steps",
                    "is the only batch key in " + path + ": DeepSpeed asserts \"Either train_batch_size or "
                    "train_micro_batch_size_per_gpu needs to be provided\"",
                    "add \"train_micro_batch_size_per_gpu\": " + n(p.mbs) + " (or \"auto\") to the config");
  if (tb > 0 && mb > 0 && acc > 0 && tb != mb * acc * dp)
    throw UserError(field + ": train_batch_size",
                    "is " + n(tb) + " in " + path + ", not train_micro_batch_size_per_gpu " + n(mb) + " x gradient_accumulation_steps " +
                        n(acc) + " x the plan's " + n(dp) + " data-parallel ranks = " + n(mb * acc * dp) +
                        ": DeepSpeed's batch assertion refuses it",
                    "make it " + n(mb * acc * dp) + " (or \"auto\"), or price the data-parallel degree the file was written for");
  if (tb > 0 && tb != p.gbs)
    throw UserError(field + ": train_batch_size", "is " + n(tb) + on + "has --gbs " + n(p.gbs),
                    "pass --gbs " + n(tb) + batch_line + ", or the config of the plan priced");
  if (acc > 0 && acc != ga)
    throw UserError(field + ": gradient_accumulation_steps",
                    "is " + n(acc) + on + "accumulates " + n(ga) + " (--gbs " + n(p.gbs) + " over --mbs " + n(p.mbs) + " x " +
                        n(dp) + " data-parallel ranks)",
                    "pass --gbs " + n(p.mbs * acc * dp) + " (" + n(p.mbs) + " x " + n(acc) + " x " + n(dp) + ")" + batch_line +
                        ", or the config of the plan priced");
  if (acc == 0 && (tb == 0) != (mb == 0) && ga != 1) {  // one of the two alone: DeepSpeed accumulates 1
    const char* key = tb != 0 ? "train_batch_size" : "train_micro_batch_size_per_gpu";
    throw UserError(field + ": " + key,
                    std::string("is given without ") + (tb != 0 ? "train_micro_batch_size_per_gpu" : "train_batch_size") +
                        " or gradient_accumulation_steps in " + path +
                        ": DeepSpeed then accumulates 1 micro-batch per step, but the plan priced accumulates " + n(ga) +
                        " (--gbs " + n(p.gbs) + ", --mbs " + n(p.mbs) + ", " + n(dp) + " data-parallel ranks)",
                    "add \"gradient_accumulation_steps\": " + n(ga) + " (or \"auto\") to the config, or pass --gbs " +
                        n(p.mbs * dp) + batch_line);
  }
}

}  // namespace

void checkDeepSpeedPlan(const DeepSpeedConfigRead& ds, const models::Plan& p, const std::string& precision,
                        const std::string& path, const std::string& field) {
  checkBatch(ds, p, path, field);
  if (ds.pipeline_stages > 0 && ds.pipeline_stages != p.pp)
    throw UserError(field + ": pipeline.stages", "is " + std::to_string(ds.pipeline_stages) + " in " + path +
                                                     ", but the plan priced has --pp " + std::to_string(p.pp),
                    "pass --pp " + std::to_string(ds.pipeline_stages) + ", or the config of the plan priced");
  // The optimizer's state is priced by --optimizer: DeepSpeed's adam/adamw (FusedAdam; 2 fp32 moments)
  // are adamw's, torch's sgd is sgd's; another optimizer (lamb, 1-bit Adam, lion, muon, …) is not priced.
  if (!ds.optimizer.empty()) {
    const bool adam = ds.optimizer == "adam" || ds.optimizer == "adamw";
    const bool same = adam ? p.optimizer == runconfig::OptimizerKind::AdamW
                           : ds.optimizer == "sgd" && p.optimizer == runconfig::OptimizerKind::SGD;
    if (!same)
      throw UserError(field + ": optimizer.type", "is " + ds.optimizer + " in " + path + ", but the plan priced has --optimizer " +
                                                      runconfig::toString(p.optimizer),
                      adam || ds.optimizer == "sgd" ? "pass --optimizer " + std::string(adam ? "adamw" : "sgd") + ", or the config of the plan priced"
                                                    : "DeepSpeed's " + ds.optimizer + " is not priced: price the config with \"AdamW\" or \"SGD\"");
  }
  // DeepSpeed has no FP8 mode: an FP8 job is a bf16 config with Transformer Engine's FP8 linears in the
  // model code (export --format deepspeed writes it so). fp16 with FP8 is not that job.
  if (ds.precision.empty() || ds.precision == precision || (ds.precision == "bf16" && precision == "fp8")) return;
  throw UserError(field + ": " + ds.precision, "is enabled in " + path + ", but the plan priced is --precision " + precision,
                  precision == "fp8" ? "enable bf16 instead (DeepSpeed has no FP8 mode: an FP8 job is a bf16 config with "
                                       "Transformer Engine's FP8 linears in the model code), or pass --precision fp16"
                                     : "pass --precision " + ds.precision + " (a --batch line: \"precision\"), or the config of the plan priced");
}

}  // namespace trainscope::apps
