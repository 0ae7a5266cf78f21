// resume_check.cpp — see resume_check.h.
#include "state/resume_check.h"

#include <sys/stat.h>

#include <cmath>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/workloads/hf_checkpoint.h"
#include "trainscope/workloads/memory.h"

namespace trainscope::runtime {

void checkCheckpointModel(const std::string& dir, const TrainConfig& cfg, bool resume, const std::string& field) {
  const std::string fix = resume ? "pass a folder an earlier `run --save` wrote"
                                 : "pass a Hugging Face checkpoint folder (config.json and model.safetensors)";
  struct stat st {};
  if (dir.empty()) throw UserError(field, "is empty", fix);
  if (::stat(dir.c_str(), &st) != 0) throw UserError(field, dir + " does not exist", fix);
  if (!S_ISDIR(st.st_mode)) throw UserError(field, dir + " is not a folder", fix);
  const std::string config = dir + "/config.json";
  if (::stat(config.c_str(), &st) != 0) throw UserError(field, dir + " holds no config.json", fix);
  const workloads::Workload saved = workloads::parse(files::readTextFile(config, field, fix), config);
  const auto want = workloads::parameterTensors(cfg.model), have = workloads::parameterTensors(saved);
  bool same = want.size() == have.size() && workloads::hfShapeType(saved) == workloads::hfShapeType(cfg.model);
  for (size_t i = 0; same && i < want.size(); ++i) same = want[i].name == have[i].name && want[i].shape == have[i].shape;
  if (!same)
    throw UserError(field, config + " describes another model than workload " + cfg.model.name + " (" +
                               workloads::hfModelType(saved) + ", " + std::to_string(saved.parameterCount()) +
                               " parameters, against " + std::to_string(cfg.model.parameterCount()) + ")",
                    "pass --workload " + config + ", or a checkpoint of " + cfg.model.name);
}

// state.json's counters, each a whole number in range (loss_scale a positive finite number), so that
// a damaged file is refused naming the key rather than resuming at a wrong step (a missing or
// fractional "step" read as 0 or cut) or failing deep in LibTorch (a negative data position).
Trainer::Resumable savedCounters(const nlohmann::json& s, const std::string& dir, const std::string& field) {
  auto damaged = [&](const std::string& key, const nlohmann::json& v, const std::string& want) {
    return UserError(field,
                     dir + "/trainscope/state.json is damaged: \"" + key + "\" is " + (v.is_null() ? "missing" : v.dump()) +
                         ", not " + want,
                     "resume from another checkpoint, or --init-from " + dir + " for its weights alone");
  };
  constexpr int64_t kMost = int64_t(1) << 50;
  auto whole = [&](const nlohmann::json& v, const std::string& key, int64_t most) {
    const bool ok = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(most)
                                           : v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= most;
    if (!ok) throw damaged(key, v, "a whole number from 0 to " + std::to_string(most));
    return v.get<int64_t>();
  };
  auto at = [&](const char* key) { return s.contains(key) ? s[key] : nlohmann::json(); };
  Trainer::Resumable r;
  r.step = whole(at("step"), "step", kMost);
  r.optimizer_steps = whole(at("optimizer_steps"), "optimizer_steps", r.step);
  r.clean_steps = whole(at("clean_steps"), "clean_steps", r.step);
  const nlohmann::json scale = at("loss_scale");
  if (!scale.is_number() || !std::isfinite(scale.get<double>()) || !(scale.get<double>() > 0))
    throw damaged("loss_scale", scale, "a positive finite number");
  r.loss_scale = scale.get<double>();
  // AdamW's (and 8-bit Adam's) step count of the per-parameter state: one per optimizer step at most.
  const nlohmann::json o = s.value("optimizer", nlohmann::json::object());
  const nlohmann::json pp = o.is_object() ? o.value("per_parameter", nlohmann::json()) : nlohmann::json();
  if (pp.is_object() && pp.contains("counter")) {
    const nlohmann::json c = pp["counter"];
    const bool ok = c.is_number() && std::isfinite(c.get<double>()) && c.get<double>() >= 0 &&
                    c.get<double>() <= double(r.step) && std::floor(c.get<double>()) == c.get<double>();
    if (!ok) throw damaged("optimizer.per_parameter.counter", c, "a whole number from 0 to the step, " + std::to_string(r.step));
  }
  return r;
}

Trainer::Resumable checkResumeAgainst(const nlohmann::json& s, const std::string& dir, const TrainConfig& cfg,
                                      const std::string& field) {
  auto need = [&](bool ok, const std::string& what, const std::string& how) {
    if (!ok) throw UserError(field, dir + " was saved " + what, how);
  };
  const Trainer::Resumable counters = savedCounters(s, dir, field);
  const int64_t step = counters.step;
  if (step >= cfg.steps)
    throw UserError("--steps", "is " + std::to_string(cfg.steps) + " but the checkpoint --resume " + dir + " continues is at step " +
                                   std::to_string(step) + " already: nothing is left to run",
                    "pass --steps greater than " + std::to_string(step) + " (steps count from the run's start)");
  const nlohmann::json d = s.value("data", nlohmann::json::object());
  const nlohmann::json o = s.value("optimizer", nlohmann::json::object());
  need(d.value("source", "") == cfg.data && d.value("seed", uint64_t(0)) == cfg.seed,
       "reading data " + d.value("source", "") + " (seed " + std::to_string(d.value("seed", uint64_t(0))) + ")",
       "pass the same --data and --seed");
  need(d.value("seq", int64_t(0)) == cfg.seq && d.value("global_batch", int64_t(0)) == cfg.global_batch,
       "with seq " + std::to_string(d.value("seq", int64_t(0))) + " and a global batch of " +
           std::to_string(d.value("global_batch", int64_t(0))) + ": the data position would differ",
       "pass the same --seq and --gbs");
  const std::string kind = o.value("kind", "");
  need(kind == toString(cfg.optimizer), "with optimizer " + kind, "pass --optimizer " + kind + ", or --init-from " + dir + " for a fresh optimizer");
  const std::string precision = s.value("precision", std::string(toString(cfg.precision)));
  need(precision == toString(cfg.precision),
       "in precision " + precision + " (its loss scaler and low-precision state do not carry over to " +
           toString(cfg.precision) + ")",
       "pass --precision " + precision + ", or --init-from " + dir + " for its weights alone");
  return counters;
}

}  // namespace trainscope::runtime
