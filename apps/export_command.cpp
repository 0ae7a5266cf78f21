// export_command.cpp — see export_command.h. The formats are made in tuner/ (export.h); this file
// opens the study read-only, picks the candidate, prints the notes (and, for Megatron-LM, what the
// plan should take there: tuner/megatron_prediction.h) and writes the text to stdout or -o under the
// one output rule (files.h).
#include "export_command.h"

#include <filesystem>
#include <iostream>
#include <unistd.h>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/json_text.h"
#include "trainscope/models/cluster.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/tuner/export.h"
#include "trainscope/tuner/megatron_prediction.h"
#include "trainscope/tuner/study.h"
#include "trainscope/tuner/study_inputs.h"

namespace trainscope::apps {

namespace rt = trainscope::runconfig;
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

// A file the export puts beside -o (the model's config.json): under -o's rule, and also replaced
// without --overwrite when it already holds exactly this text (the config.json of an earlier export
// of the same model into the same folder: deepspeed, then training-args).
files::OutputRule companionRule(const std::string& study, const std::string& text, bool overwrite) {
  files::OutputRule rule = exportOutputRule(study, overwrite);
  rule.kind = "config.json";
  rule.earlier = [text](int fd, const std::string&) {
    std::string have;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0 && have.size() <= text.size();) have.append(buf, size_t(n));
    return have == text;
  };
  return rule;
}

std::string companionPath(const std::string& out, const tn::ExportFile& f) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(out).parent_path();
  const std::string path = (dir.empty() ? fs::path(f.name) : dir / f.name).string();
  std::error_code ec;
  if (fs::weakly_canonical(path, ec) == fs::weakly_canonical(out, ec) || fs::path(out).filename() == f.name)
    throw UserError("-o", out + " is where this export writes the model's " + f.name,
                    "name the export file otherwise, e.g. " + (dir / "export.json").string());
  return path;
}

}  // namespace

int exportStudy(const std::string& path, const std::string& format, std::optional<int64_t> trial,
                const std::string& out, bool overwrite, const std::string& reduce_dtype) {
  const tn::ExportFormat fmt = tn::parseExportFormat(format);
  if (reduce_dtype != "default" && fmt != tn::ExportFormat::DeepSpeed)
    throw UserError("--reduce-dtype", "is DeepSpeed's communication_data_type; --format " + format + " has no such key",
                    "drop --reduce-dtype, or pass --format deepspeed");
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
  tn::StudyInputs inputs;  // damaged inputs: no cluster to name (the notes say so), a GPU one
  try {
    inputs = tn::parseStudyInputs(study.value("inputs", "{}"));
  } catch (const std::exception&) {
  }
  tn::ExportTarget target;
  target.cpu = inputs.kind == tn::ClusterKind::Cpu;
  target.reduce_dtype = reduce_dtype;
  try {  // the nodes Accelerate's num_machines counts: the study's cluster, when it is a preset or file here
    if (!inputs.cluster.empty()) target.devices_per_node = trainscope::models::loadCluster(inputs.cluster).devices_per_node;
  } catch (const std::exception&) {
  }
  tn::ExportResult e = tn::exportConfig(c, fmt, target);
  if (fmt == tn::ExportFormat::Megatron) e.notes.push_back(tn::megatronPrediction(inputs, c));
  // The prediction under the target's framework profile, beside this runtime's (issue 33); DeepSpeed's
  // with the reduce dtype the file says (communication_data_type), as predict --deepspeed-config reads it.
  if (fmt == tn::ExportFormat::DeepSpeed)
    e.notes.push_back(tn::frameworkPrediction(inputs, c, trainscope::models::Framework::Deepspeed,
                                              tn::deepspeedReduceDtype(c, target) == "fp32" ? 4.0 : 2.0));
  // Accelerate's and torchtitan's files run ZeRO-1 as plain data parallelism (their notes say so): the
  // prediction is of what the file runs. torchtitan (FSDP2) is priced under the fsdp profile, as
  // `tune --runner torchtitan` ranks it (job.h frameworkOf); it runs on GPUs only.
  rt::TrainConfig runs = c;
  if (runs.zero == rt::ZeroStage::OptimizerStates) runs.zero = rt::ZeroStage::None;
  if (fmt == tn::ExportFormat::Accelerate || fmt == tn::ExportFormat::AccelerateConfig || fmt == tn::ExportFormat::TrainingArgs)
    e.notes.push_back(tn::frameworkPrediction(inputs, runs, trainscope::models::Framework::Fsdp));
  if (fmt == tn::ExportFormat::Torchtitan && inputs.kind == tn::ClusterKind::Gpu)
    e.notes.push_back(tn::frameworkPrediction(inputs, runs, trainscope::models::Framework::Fsdp));
  if (out.empty())
    for (const auto& f : e.files)
      e.notes.push_back("the model's " + f.name + " belongs beside this export: pass -o FILE to write it beside FILE, "
                        "or write it with --format hf-config -o DIR/" + f.name);
  for (const auto& note : e.notes) std::cerr << "note: " << note << "\n";
  if (out.empty()) {
    std::cout << e.text;
    return 0;
  }
  // Every path checked before anything is written; each written whole under a temporary name and
  // moved into place: never through a link at -o (with --overwrite the link itself is replaced),
  // never half-written.
  std::vector<std::string> companions;
  for (const auto& f : e.files) {
    companions.push_back(companionPath(out, f));
    files::checkOutput(companions.back(), companionRule(path, f.text, overwrite));
  }
  files::writeAtomically(out, e.text, exportOutputRule(path, overwrite));
  for (size_t i = 0; i < e.files.size(); ++i) {
    files::writeAtomically(companions[i], e.files[i].text, companionRule(path, e.files[i].text, overwrite));
    std::cerr << "wrote the model's " << e.files[i].name << ": " << companions[i] << "\n";
  }
  return 0;
}

}  // namespace trainscope::apps
