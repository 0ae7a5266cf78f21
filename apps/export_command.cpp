// export_command.cpp — see export_command.h. The formats are made in tuner/ (export.h); this file
// opens the study read-only, picks the candidate, prints the notes (and, for Megatron-LM, what the
// plan should take there) and writes the text to stdout or -o under the one output rule (files.h).
#include "export_command.h"

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/json_text.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/tuner/export.h"
#include "trainscope/tuner/models.h"
#include "trainscope/tuner/study.h"

namespace trainscope::apps {

namespace rt = trainscope::runtime;
namespace tn = trainscope::tuner;

namespace {

// -o: never the study or a file beside it that SQLite reads with it (-wal, -shm, -journal, existing
// or not), through any name or link; an existing file only with --overwrite (files::OutputRule).
files::OutputRule exportOutputRule(const std::string& study, bool overwrite) {
  files::OutputRule rule;
  rule.field = "-o";
  rule.inputs = {study};
  rule.overwrite = overwrite;
  return rule;
}

}  // namespace

namespace {

// What the exported plan should take under Megatron-LM on the study's cluster, beside what this
// runtime takes (models/time_model.h with each framework's kernels; Megatron's 18 bytes per
// parameter, or 6 + 12/d with the distributed optimizer the export turns on for ZeRO-1).
std::string megatronPrediction(tn::Study& study, const rt::TrainConfig& c) {
  std::string cluster_name;
  int64_t devices = 0;
  try {
    const auto inputs = nlohmann::json::parse(study.value("inputs", "{}"));
    cluster_name = inputs.value("cluster", "");
    devices = inputs.value("devices", int64_t(0));
  } catch (const std::exception&) {
  }
  tn::Cluster cl;
  try {
    cl = tn::loadCluster(cluster_name);
    if (devices > cl.devices_per_node) cl = tn::loadCluster(cluster_name, devices / cl.devices_per_node);
  } catch (const std::exception&) {
    return "no Megatron-LM prediction: the study's cluster \"" + cluster_name +
           "\" is not a preset here (trainscope predict --framework megatron --cluster FILE gives one)";
  }
  if (cl.kind != tn::ClusterKind::Gpu)
    return "no Megatron-LM prediction: the study ran on a CPU cluster (trainscope predict --framework megatron "
           "--cluster a100-80gb-x8 … prices the plan on GPUs)";
  const tn::Plan p = tn::planOf(c);
  const tn::TimePrediction meg = tn::predictTime(c.model, p, cl, {-1.0, tn::Framework::Megatron});
  const tn::TimePrediction own = tn::predictTime(c.model, p, cl, {-1.0, tn::Framework::Trainscope});
  const tn::MemoryPrediction m = tn::predictMemory(c.model, p);
  const double bpp = tn::megatronBytesPerParam(p, rt::shardsOptimizer(c.zero));
  const int64_t meg_first = tn::megatronLayersParamsOpt(c.model, p, 0, bpp) +
                            tn::megatronEmbeddingParamsOpt(c.model, p, bpp) + m.stages.front().megatron_activations;
  char text[400];
  std::snprintf(text, sizeof(text),
                "predicted on %s: Megatron-LM %.4g s/step (MFU %.0f%%), first stage %.3g GiB; this runtime %.4g "
                "s/step, %.3g GiB on its busiest stage",
                cl.name.c_str(), meg.step_s, meg.mfu * 100, double(meg_first) / double(1 << 30), own.step_s,
                double(m.peak()) / double(1 << 30));
  return text;
}

}  // namespace

int exportStudy(const std::string& path, const std::string& format, std::optional<int64_t> trial,
                const std::string& out, bool overwrite) {
  const tn::ExportFormat fmt = tn::parseExportFormat(format);
  if (!out.empty()) files::checkOutput(out, exportOutputRule(path, overwrite));
  if (trial && *trial < 0)
    throw UserError("--trial", std::to_string(*trial) + " is not a candidate id",
                    "pass a candidate id (0 or more) from the study's table");
  tn::Study study(path);  // read-only: nothing is written into the study or beside it
  const int64_t candidate = trial ? *trial : study.recommended();
  if (candidate < 0)
    throw UserError("export", path + " has no recommendation yet", "finish the study, or pass --trial N");
  const std::string cfg_json = study.candidateConfig(candidate);
  if (cfg_json.empty())
    throw UserError("--trial", "candidate " + std::to_string(candidate) + " is not a valid one in " + path,
                    "pass the id of a valid candidate (the study's table, or `trainscope view " + files::shellQuote(path) + "`)");
  rt::TrainConfig c;
  try {
    c = rt::fromJson(cfg_json, path);
  } catch (const UserError&) {
    throw;
  } catch (const std::exception& e) {
    throw UserError(
        "study",
        path + " is damaged: candidate " + std::to_string(candidate) + "'s config cannot be read (" + jsonErrorText(e.what()) + ")",
        "run the tune again");
  }
  c = tn::trainingRunOf(c);
  tn::ExportTarget target;
  try {
    target.cpu =
        nlohmann::json::parse(study.value("inputs", "{}")).value("kind", "gpu") == toString(tn::ClusterKind::Cpu);
  } catch (const std::exception&) {
  }
  tn::ExportResult e = tn::exportConfig(c, fmt, target);
  if (fmt == tn::ExportFormat::Megatron) e.notes.push_back(megatronPrediction(study, c));
  for (const auto& note : e.notes) std::cerr << "note: " << note << "\n";
  if (out.empty()) {
    std::cout << e.text;
  } else {
    // Written whole under a temporary name and moved into place: never through a link at -o (with
    // --overwrite the link itself is replaced), never half-written.
    files::writeAtomically(out, e.text, exportOutputRule(path, overwrite));
  }
  return 0;
}

}  // namespace trainscope::apps
