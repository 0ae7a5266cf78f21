// deepspeed_config.cpp — see deepspeed_config.h. Keys and defaults: deepspeed 0.19.8
// runtime/zero/config.py (DeepSpeedZeroConfig: reduce_bucket_size 5e8 > 0, allgather_bucket_size 5e8,
// stage3_prefetch_bucket_size 5e7, stage3_max_live_parameters 1e9, stage3_param_persistence_threshold
// 1e5, all >= 0; overlap_comm None → stage == 3 (overlap_comm_valid); contiguous_gradients true) and
// runtime/config.py get_communication_data_type (fp32, fp16 or bf16, lower-cased; none: the model's).
#include "deepspeed_config.h"

#include <cctype>
#include <cmath>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/json_text.h"

namespace trainscope::apps {

namespace {

// Hugging Face's "auto" for the keys it fills from the model (transformers 5.25
// integrations/deepspeed.py trainer_config_finalize: h², 0.9·h² and 10·h); 0 for any other key.
double autoValue(const std::string& key, const workloads::Workload& w) {
  const double h = double(w.n_embd);
  if (key == "reduce_bucket_size") return h * h;
  if (key == "stage3_prefetch_bucket_size") return std::floor(0.9 * h * h);
  if (key == "stage3_param_persistence_threshold") return 10 * h;
  return 0;
}

}  // namespace

DeepSpeedConfigRead readDeepSpeedConfig(const std::string& path, const workloads::Workload& w, int zero,
                                        const std::string& field) {
  const std::string text = files::readTextFile(path, field, "pass DeepSpeed's JSON config (ds_config.json)");
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) throw UserError(field, path + " is not a JSON object", "pass DeepSpeed's JSON config (ds_config.json)");
  DeepSpeedConfigRead out;
  out.zero.from_config = true;
  if (j.contains("communication_data_type") && !j["communication_data_type"].is_null()) {
    const nlohmann::json& v = j["communication_data_type"];
    std::string t = v.is_string() ? v.get<std::string>() : "";
    for (char& c : t) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (t != "fp32" && t != "fp16" && t != "bf16")
      throw UserError(field + ": communication_data_type", "is " + jsonText(v) + " in " + path,
                      "DeepSpeed takes \"fp32\", \"fp16\" or \"bf16\"");
    out.reduce_bytes = t == "fp32" ? 4 : 2;
  }
  // What the engine is built with beside ZeRO: the micro-batch and the 16-bit mode (predict compares
  // them with its flags: a file of another micro-batch or dtype is not the job priced).
  if (j.contains("train_micro_batch_size_per_gpu") && j["train_micro_batch_size_per_gpu"] != "auto") {
    const nlohmann::json& v = j["train_micro_batch_size_per_gpu"];
    if (!v.is_number_integer() || v.get<int64_t>() < 1)
      throw UserError(field + ": train_micro_batch_size_per_gpu", "is " + jsonText(v) + " in " + path,
                      "give a whole number of sequences, 1 or more, or \"auto\"");
    out.micro_batch = v.get<int64_t>();
  }
  for (const char* mode : {"bf16", "fp16"})
    if (j.contains(mode) && j[mode].is_object() && j[mode].value("enabled", nlohmann::json(false)) == true)
      out.precision = mode;
  const nlohmann::json zo = j.value("zero_optimization", nlohmann::json::object());
  if (!zo.is_object())
    throw UserError(field + ": zero_optimization", "must be an object in " + path, "see DeepSpeed's ZeRO configuration");
  const std::string at = field + ": zero_optimization.";
  if (zo.contains("stage")) {
    const nlohmann::json& s = zo["stage"];
    if (!s.is_number_integer() || s.get<int64_t>() < 0 || s.get<int64_t>() > 3)
      throw UserError(at + "stage", "is " + jsonText(s) + " in " + path, "DeepSpeed's stages are 0, 1, 2 and 3");
    if (s.get<int64_t>() != zero)
      throw UserError(at + "stage", "is " + jsonText(s) + " in " + path + ", but the plan priced is ZeRO-" + std::to_string(zero),
                      "pass --zero " + jsonText(s) + " (a --batch line: \"zero\"), or the config of the stage priced");
  }
  struct Count {
    const char* key;
    double models::DeepSpeedZero::*member;
    bool positive;
  };
  for (const Count& c : {Count{"reduce_bucket_size", &models::DeepSpeedZero::reduce_bucket_size, true},
                         Count{"allgather_bucket_size", &models::DeepSpeedZero::allgather_bucket_size, false},
                         Count{"stage3_prefetch_bucket_size", &models::DeepSpeedZero::prefetch_bucket_size, false},
                         Count{"stage3_max_live_parameters", &models::DeepSpeedZero::max_live_parameters, false},
                         Count{"stage3_param_persistence_threshold", &models::DeepSpeedZero::param_persistence_threshold,
                               false}}) {
    if (!zo.contains(c.key)) continue;
    const nlohmann::json& v = zo[c.key];
    double x = NAN;
    if (v.is_number()) x = v.get<double>();
    else if (v == "auto" && autoValue(c.key, w) > 0) x = autoValue(c.key, w);
    if (!std::isfinite(x) || x < 0 || (c.positive && x == 0) || x > 1e15)
      throw UserError(at + c.key, "is " + jsonText(v) + " in " + path,
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
  if (out.zero.overlap_comm < 0) out.zero.overlap_comm = zero == 3 ? 1 : 0;  // DeepSpeed's overlap_comm_valid
  return out;
}

}  // namespace trainscope::apps
