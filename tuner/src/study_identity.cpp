// study_identity.cpp — which study file a study's id belongs to (slurm.h claimStudyId).
//
// The id names the study's Slurm jobs and steps (job.h slurmStepName), and the launches recorded in
// the study are cancelled on --resume (tune.cpp). A copy of the study file (cp -r of its folder, a
// backup put elsewhere) holds the same id and the same records: resumed, it would end the original's
// steps. So the study also keeps the file it was made in (its device and inode, and its path for the
// message), and a study opened in another file takes a new id: the recorded launches then belong to
// another study (SlurmLaunch::study_id) and are left alone. A move on the same file system keeps the
// inode and the id (the original is gone: its steps are this study's). A hard link is the same file.
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <random>

#include <nlohmann/json.hpp>

#include "trainscope/tuner/job.h"
#include "trainscope/tuner/slurm.h"
#include "trainscope/tuner/study.h"

namespace trainscope::tuner {
namespace {

std::string newStudyId() {
  std::random_device rd;
  const uint64_t r = (uint64_t(rd()) << 32) ^ uint64_t(rd());
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(r));
  return hex;
}

std::string absolutePath(const std::string& path) {
  char* real = ::realpath(path.c_str(), nullptr);
  if (!real) return path;
  std::string out = real;
  std::free(real);
  return out;
}

}  // namespace

std::string claimStudyId(Study& study, const std::string& path, std::string* note) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return study.value("study_id");  // the lock holds it: not reached
  const nlohmann::json here = {{"path", absolutePath(path)},
                               {"device", static_cast<unsigned long long>(st.st_dev)},
                               {"inode", static_cast<unsigned long long>(st.st_ino)}};
  const nlohmann::json had = nlohmann::json::parse(study.value("study_file"), nullptr, false);
  std::string id = study.value("study_id");
  const bool recorded = had.is_object() && had.contains("device") && had.contains("inode");
  if (!validStudyId(id)) {
    id = newStudyId();  // a new study (or a damaged id): nothing of it was launched under another
  } else if (recorded && (had["device"] != here["device"] || had["inode"] != here["inode"])) {
    const std::string from = had.contains("path") && had["path"].is_string() ? had["path"].get<std::string>() : "?";
    const std::string old = id;
    id = newStudyId();
    if (note)
      *note = "--study: " + path + " is a copy of the study file " + from + " (not the file its Slurm ids were "
              "recorded in), so it takes a new id (" + id + ", was " + old + ") and leaves the Slurm jobs and "
              "steps the original started alone: scancel them (squeue --name=" + slurmStepName(old) +
              ") if the original is gone";
  }
  study.setValue("study_id", id);
  study.setValue("study_file", here.dump());
  return id;
}

}  // namespace trainscope::tuner
