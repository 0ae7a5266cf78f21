// checkpoint_dir.cpp — see checkpoint_dir.h.
#include "state/checkpoint_dir.h"

#include <ATen/ATen.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>

#include <nlohmann/json.hpp>

#include "state/fp8_state.h"
#include "state/gather.h"
#include "state/hf_weights.h"
#include "state/optim_state.h"
#include "state/resume_check.h"
#include "state/temp_folders.h"
#include "trainscope/common/error.h"
#include "trainscope/common/json_text.h"
#include "trainscope/common/files.h"
#include "trainscope/common/safetensors.h"
#include "trainscope/runtime/comm.h"
#include "trainscope/runtime/optim.h"
#include "trainscope/runtime/parallel.h"
#include "trainscope/workloads/hf_checkpoint.h"
#include "trainscope/workloads/memory.h"

namespace trainscope::runtime {
namespace {

constexpr const char* kFormat = "trainscope-checkpoint";
constexpr const char* kStateDir = "trainscope";
constexpr const char* kFix = "pass a new or empty folder, or one an earlier `run --save` wrote";

bool lstatIs(const std::string& p, mode_t type) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && (st.st_mode & S_IFMT) == type;
}

// The folder's entries (without . and ..); empty when it cannot be read.
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out.push_back(e->d_name);
  ::closedir(d);
  return out;
}

// The state.json of a trainscope checkpoint at dir (null when there is none, or it is not ours).
nlohmann::json stateOf(const std::string& dir, const std::string& field) {
  const std::string sd = dir + "/" + kStateDir, path = sd + "/state.json";
  if (!lstatIs(sd, S_IFDIR) || !lstatIs(path, S_IFREG)) return nullptr;
  const std::string text = files::readTextFile(path, field, kFix);
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    if (j.is_object() && j.value("format", "") == kFormat) return j;
  } catch (const nlohmann::json::parse_error& e) {
    // Ours by its place (DIR/trainscope/state.json): a cut-short file is said to be damaged, not
    // "no trainscope state" (which sent the user after another folder).
    throw UserError(field, path + " is damaged: not valid JSON (" + jsonErrorText(e.what()) +
                               jsonCutShort(e.byte, text.size(), e.what()) + ")",
                    "restore the checkpoint folder from a copy, or resume from an earlier --save (--save-every)");
  } catch (const nlohmann::json::exception&) {
  }
  return nullptr;
}

void syncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void writeText(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw UserError("--save", "could not create " + path + ": " + std::strerror(errno), "check the folder");
  const char* p = text.data();
  size_t n = text.size();
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      ::close(fd);
      throw UserError("--save", "could not write " + path + ": " + std::strerror(errno), "check the disk's free space");
    }
    p += w;
    n -= size_t(w);
  }
  ::fsync(fd);
  ::close(fd);
}

const char* dtypeName(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "F32";
    case at::kChar: return "I8";
    case at::kByte: return "U8";
    case at::kBFloat16: return "BF16";
    case at::kHalf: return "F16";
    case at::kLong: return "I64";
    default: return "";
  }
}

at::ScalarType scalarOf(const std::string& d) {
  if (d == "F32") return at::kFloat;
  if (d == "I8") return at::kChar;
  if (d == "U8") return at::kByte;
  if (d == "BF16") return at::kBFloat16;
  if (d == "F16") return at::kHalf;
  if (d == "I64") return at::kLong;
  return at::kDouble;
}

// Optimizer state as safetensors: "state.0", "state.1", … in stateTensors order.
int64_t writeState(const std::string& path, const std::vector<at::Tensor>& state) {
  std::vector<at::Tensor> cpu;
  std::vector<safetensors::TensorView> views;
  for (size_t i = 0; i < state.size(); ++i) {
    cpu.push_back(state[i].detach().to(at::kCPU).contiguous());
    const at::Tensor& t = cpu.back();
    views.push_back({"state." + std::to_string(i), dtypeName(t.scalar_type()), t.sizes().vec(), t.data_ptr(),
                     int64_t(t.nbytes())});
  }
  return safetensors::writeFile(path, views, {{"format", "pt"}}, "--save");
}

std::vector<at::Tensor> readState(const std::string& path, const std::string& field) {
  std::map<std::string, safetensors::Tensor> m = safetensors::readFile(path, field);
  std::vector<at::Tensor> out;
  for (size_t i = 0;; ++i) {
    auto it = m.find("state." + std::to_string(i));
    if (it == m.end()) break;
    const safetensors::Tensor& s = it->second;
    std::vector<char> bytes = s.bytes;
    out.push_back(at::from_blob(bytes.data(), s.shape, at::TensorOptions().dtype(scalarOf(s.dtype))).clone());
  }
  if (out.size() != m.size())
    throw UserError(field, path + " holds tensors other than state.0 … state.N", "pass a checkpoint `run --save` wrote");
  return out;
}

std::string stageFile(int stage, int pp) {
  char b[64];
  std::snprintf(b, sizeof(b), "model-%05d-of-%05d.safetensors", stage + 1, pp);
  return b;
}

// Under pipeline parallelism: model.safetensors.index.json naming each stage's file.
void writeIndex(const std::string& dir, const TrainConfig& cfg) {
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  int64_t total = 0;
  for (int s = 0; s < int(cfg.pp); ++s) {
    const StageSpec st = stageOf(cfg, s);
    std::vector<std::string> names;
    for (const ParamInfo& p : GptWeights::info(st))
      if (!(p.name == "wte" && !st.first)) names.push_back(p.name);
    for (const auto& [hf, bytes] : hfNames(cfg.model, names)) {
      map[hf] = stageFile(s, int(cfg.pp));
      total += bytes;
    }
  }
  nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
  writeText(dir + "/model.safetensors.index.json", index.dump(2) + "\n");
}

// Optimizers whose per-parameter form is a conversion of their state (optim.h, Elementwise::live).
bool convertsState(const TrainConfig& c) {
  return c.optimizer == OptimizerKind::Adafactor || c.optimizer == OptimizerKind::Adam8bit;
}

bool optimizerReplicated(const TrainConfig& c) {
  return !shardsOptimizer(c.zero) && c.tp == 1 && c.pp == 1 && c.ep == 1;
}

// What a resume under another layout does not carry exactly (docs/checkpoints.md), in one line; ""
// where the re-made state is the saved one. Adafactor into a larger tp: each shard's factor across
// its cut dimension is estimated (a whole matrix keeps no shard's). 8-bit Adam into other blocks
// (another tp, or ZeRO-2's slices on either side): quantised again, within half a code.
std::string conversionNotice(const std::string& kind, const nlohmann::json& saved, const TrainConfig& c,
                             const std::string& field) {
  const int64_t tp = saved.value("tp", int64_t(1)), zero = saved.value("zero", int64_t(0));
  if (kind == "adafactor" && c.tp > tp)
    return field + ": adafactor's factors saved under tp " + std::to_string(tp) + " are cut for tp " +
           std::to_string(c.tp) + ": each shard's column factor (row factor of a row-parallel matrix) is " +
           "estimated from the whole matrix's (its mean exact, its shape the whole's), so the next steps "
           "approximate those of a run under tp " + std::to_string(c.tp) + " from the start (docs/checkpoints.md)";
  if (kind == "adam8bit" && (c.tp != tp || zero == 2 || stageNumber(c.zero) == 2))
    return field + ": 8-bit Adam's moments are quantised again in this layout's blocks (tp " + std::to_string(c.tp) +
           ", ZeRO " + std::to_string(stageNumber(c.zero)) + " against the saved tp " + std::to_string(tp) +
           ", ZeRO " + std::to_string(zero) + "): each within half a code of the saved ones (docs/checkpoints.md)";
  return "";
}

nlohmann::json layoutJson(const TrainConfig& c) {
  return {{"world", c.world}, {"dp", c.dp}, {"tp", c.tp}, {"pp", c.pp}, {"cp", c.cp}, {"ep", c.ep},
          {"zero", stageNumber(c.zero)}, {"zero_shard_size", c.zero_shard_size}, {"virtual_stages", c.virtual_stages}};
}

std::string layoutText(const nlohmann::json& l) {
  std::string t;
  for (const char* k : {"world", "dp", "tp", "pp", "cp", "ep", "zero", "zero_shard_size", "virtual_stages"})
    if (l.contains(k)) t += (t.empty() ? "" : " ") + std::string(k) + " " + l[k].dump();
  return t;
}

}  // namespace

void checkCheckpointTarget(const std::string& dir, const std::string& field) {
  if (dir.empty()) throw UserError(field, "is empty", "give the checkpoint folder");
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) throw UserError(field, dir + ": " + std::strerror(errno), kFix);
    const std::string parent = parentOf(dir);
    struct stat ps {};
    if (::stat(parent.c_str(), &ps) != 0 || !S_ISDIR(ps.st_mode))
      throw UserError(field, "the folder " + parent + " (where " + dir + " would be made) does not exist",
                      "create it first, or pass a path in an existing folder");
    return;
  }
  if (S_ISLNK(st.st_mode))
    throw UserError(field, dir + " is a symbolic link: a checkpoint is never written through a link",
                    "pass the folder it points to, or a new path");
  if (!S_ISDIR(st.st_mode)) throw UserError(field, dir + " is a file, not a checkpoint folder", kFix);
  if (!stateOf(dir, field).is_null() || entries(dir).empty()) return;
  throw UserError(field, dir + " is a folder that holds no trainscope checkpoint (no trainscope/state.json), so it is not replaced",
                  kFix);
}

std::string whyCannotSave(const TrainConfig& c) {
  if (c.local_sgd > 0 && c.dp > 1) return "under local SGD the data-parallel replicas hold different weights between averagings";
  const std::string hf = workloads::hfUnsupported(c.model);
  if (!hf.empty()) return "workload " + c.model.name + " has no Hugging Face layout: " + hf;
  return "";
}

namespace {

// Rank 0: the folder the new checkpoint is written into, beside DIR (after DIR's check), with its
// trainscope/ folder.
std::string makeTempFolder(const std::string& dir) {
  checkCheckpointTarget(dir, "--save");
  removeStaleTemps(dir);  // what a save killed mid-write left, when provably ours (temp_folders.h)
  std::string tmp = parentOf(dir) + "/." + baseName(dir) + ".tmp-XXXXXX";
  if (!::mkdtemp(tmp.data()))
    throw UserError("--save", "could not create a folder beside " + dir + ": " + std::strerror(errno),
                    "check that its folder is writable");
  const mode_t mask = ::umask(0);  // mkdtemp makes 0700; a checkpoint folder is as any new folder
  ::umask(mask);
  ::chmod(tmp.c_str(), 0777 & ~mask);
  writeTempMarker(tmp, dir);  // first: who writes this folder, so a later save can tell it is stale
  if (::mkdir((tmp + "/" + kStateDir).c_str(), 0755) != 0)
    throw UserError("--save", "could not create " + tmp + "/" + kStateDir + ": " + std::strerror(errno), "check the disk");
  return tmp;
}

// trainscope/state.json: what resuming needs besides the tensors, and what the other files hold.
nlohmann::json stateJson(const TrainConfig& cfg, const Trainer::Resumable& r, bool replicated,
                         const nlohmann::json& per_parameter, const nlohmann::json& fp8) {
  nlohmann::json s;  // (readers find every key by name; the order is JSON's)
  s["format"] = kFormat;
  s["version"] = 1;
  s["step"] = r.step;
  s["optimizer_steps"] = r.optimizer_steps;
  s["loss_scale"] = r.loss_scale;
  s["clean_steps"] = r.clean_steps;
  s["data"] = {{"source", cfg.data}, {"seed", cfg.seed}, {"seq", cfg.seq}, {"global_batch", cfg.global_batch},
               {"next_sample", r.step * cfg.global_batch}};
  s["rng"] = "none kept: initialisation and the synthetic data are functions of the seed and the sample index, and "
             "training draws no random numbers (no dropout)";
  const bool per_name = !per_parameter.is_null() && !convertsState(cfg);
  s["optimizer"] = {{"kind", toString(cfg.optimizer)},
                    {"files", per_name ? "per-parameter" : replicated ? "replicated" : "per-rank"}};
  if (!per_parameter.is_null()) s["optimizer"]["per_parameter"] = per_parameter;
  s["precision"] = toString(cfg.precision);
  if (!fp8.is_null()) s["fp8"] = fp8;  // the FP8 linears' amax histories and scales (fp8_state.h)
  s["layout"] = layoutJson(cfg);
  s["model_type"] = workloads::hfModelType(cfg.model);
  s["config"] = nlohmann::json::parse(toJson(cfg));
  return s;
}

// The bytes of the regular files directly in `dir`, but for the temporary folder's marker, which the
// swap into place removes (counted, the run database's row was its size over the checkpoint's).
int64_t fileBytes(const std::string& dir) {
  int64_t bytes = 0;
  for (const std::string& e : entries(dir)) {
    if (e == kTempMarker) continue;
    struct stat st {};
    if (::lstat((dir + "/" + e).c_str(), &st) == 0 && S_ISREG(st.st_mode)) bytes += st.st_size;
  }
  return bytes;
}

// The written checkpoint `tmp` takes DIR's place in one step. DIR is checked again (what was planted
// meanwhile is refused); the entry the exchange gives back must be the one checked.
void swapIntoPlace(const std::string& tmp, const std::string& dir) {
  removeTempMarker(tmp);   // a complete checkpoint holds none
  struct stat checked {};  // what DIR is before its check: what the exchange must give back
  const bool existed = ::lstat(dir.c_str(), &checked) == 0;
  checkCheckpointTarget(dir, "--save");
  if (!existed) {  // no replace: whatever appeared at DIR since the check stays
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_NOREPLACE) != 0)
      throw UserError("--save", "could not move " + tmp + " to " + dir + ": " + std::strerror(errno), kFix);
    return;
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0)
    throw UserError("--save", "could not put the new checkpoint at " + dir + " (" + std::strerror(errno) +
                    "); it is complete in " + tmp, "move it there by hand");
  // What came back must be the folder that was checked; anything swapped in meanwhile goes back
  // where it was, untouched, and the new checkpoint stays complete beside it.
  struct stat swapped {};
  if (::lstat(tmp.c_str(), &swapped) != 0 || swapped.st_dev != checked.st_dev || swapped.st_ino != checked.st_ino) {
    ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE);
    throw UserError("--save", dir + " changed while the checkpoint was written; it is left as it is and the new "
                    "checkpoint is complete in " + tmp, "move it where you want it by hand");
  }
  // The previous checkpoint, now at the temporary name: marked ours (were this run killed while
  // removing it, the next save would finish the job), then its files removed through the folder
  // checked above, never through a link swapped in since.
  try {
    writeTempMarker(tmp, dir);
  } catch (const UserError&) {
  }
  removeCheckpointFiles(tmp, checked.st_dev, checked.st_ino);
}

}  // namespace

SavedCheckpoint saveCheckpoint(const std::string& dir, const TrainConfig& cfg, const Trainer& trainer, Comm& comm,
                               int64_t shard_bytes, bool kill_mid_write) {
  const auto t0 = std::chrono::steady_clock::now();
  const int rank = comm.layout().rank, world = comm.layout().world;
  const Trainer::Resumable r = trainer.resumable();
  std::string tmp = rank == 0 ? makeTempFolder(dir) : std::string();
  // A save that fails here (a full disk, a refusal) takes its unfinished folder with it on rank 0;
  // only a killed one leaves it, for the next save to remove (temp_folders.h).
  struct DropOnError {
    std::string tmp;
    bool armed;
    ~DropOnError() {
      if (armed && std::uncaught_exceptions() > 0) removeCheckpointFiles(tmp);
    }
  } drop{tmp, rank == 0};
  if (world > 1) {
    const std::string key = "trainscope.checkpoint." + std::to_string(r.step);
    if (rank == 0) comm.storeSet(key, tmp);
    else tmp = comm.storeGet(key);
  }
  // The optimizer state is saved per Hugging Face parameter name below, whatever the layout. State
  // that form only converts (Adafactor's factors, 8-bit Adam's blocks) is also saved as each rank
  // holds it, so that the same layout resumes bit for bit from it.
  const bool per_name = !convertsState(cfg);
  const bool replicated = optimizerReplicated(cfg);
  if (!replicated && !per_name)
    writeState(tmp + "/" + kStateDir + "/optimizer-rank-" + std::to_string(rank) + ".safetensors", trainer.optimizerState());
  // The weights: each stage's TP shards put together (collective over the TP group), then written by
  // the stage's first rank (tp, dp and cp rank 0): the whole model, or under pp one shard per stage.
  const Layout& l = comm.layout();
  const std::vector<std::pair<std::string, at::Tensor>> stage = gatherStage(cfg, trainer.wholeMasterParams(), comm);
  if (l.tp_rank == 0 && l.dp_rank == 0 && l.cp_rank == 0) {
    const std::vector<std::pair<std::string, at::Tensor>> hf = toHf(cfg.model, stage);
    std::vector<safetensors::TensorView> views;
    for (const auto& [name, t] : hf) views.push_back({name, "F32", t.sizes().vec(), t.data_ptr(), int64_t(t.nbytes())});
    if (l.pp == 1) safetensors::writeModel(tmp, views, {{"format", "pt"}}, shard_bytes, "--save");
    else safetensors::writeFile(tmp + "/" + stageFile(l.pp_rank, l.pp), views, {{"format", "pt"}}, "--save");
  }
  if (rank == 0 && l.pp > 1) writeIndex(tmp, cfg);
  if (rank == 0) {
    if (kill_mid_write) {  // testing seam (--inject-failure save): the checkpoint is half written
      std::signal(SIGKILL, SIG_DFL);
      std::raise(SIGKILL);
    }
    writeText(tmp + "/config.json", workloads::hfConfigJson(cfg.model, "--save"));
    if (replicated && !per_name) writeState(tmp + "/" + kStateDir + "/optimizer.safetensors", trainer.optimizerState());
  }
  // The same state per Hugging Face parameter name, whatever the layout (optim_state.h; collective).
  const nlohmann::json per_parameter = saveLayoutFree(tmp, cfg, trainer, comm);
  const nlohmann::json fp8 = saveFp8State(tmp, cfg, trainer, comm);  // per parameter name too
  if (world > 1) comm.world().barrier();  // every rank's optimizer file is in
  SavedCheckpoint out;
  out.step = r.step;
  if (rank == 0) {
    // state.json last: a folder without it is no checkpoint, and it names what the others hold.
    writeText(tmp + "/" + kStateDir + "/state.json", stateJson(cfg, r, replicated, per_parameter, fp8).dump(2) + "\n");
    syncPath(tmp + "/" + kStateDir);
    syncPath(tmp);
    out.bytes = fileBytes(tmp) + fileBytes(tmp + "/" + kStateDir);
    drop.armed = false;  // complete: a refused swap leaves it, whole, where the message says
    swapIntoPlace(tmp, dir);
    syncPath(parentOf(dir));
  }
  if (world > 1) comm.world().barrier();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

static void resumeState(const nlohmann::json& s, const std::string& dir, const TrainConfig& cfg, int rank,
                        const std::string& field, LoadedCheckpoint* loaded);

LoadedCheckpoint loadCheckpoint(const std::string& dir, const TrainConfig& cfg, int rank, bool resume,
                                const std::string& field) {
  checkCheckpointModel(dir, cfg, resume, field);
  LoadedCheckpoint out;
  out.full = fromHf(cfg.model, safetensors::readModel(dir, field), dir, field);
  if (!resume) return out;
  const nlohmann::json s = stateOf(dir, field);
  if (s.is_null())
    throw UserError(field, dir + " holds weights but no trainscope state (trainscope/state.json), so there is nothing to resume",
                    "use --init-from " + dir + " to start from its weights with a fresh optimizer");
  try {
    resumeState(s, dir, cfg, rank, field, &out);
  } catch (const nlohmann::json::exception&) {
    throw UserError(field, dir + "/trainscope/state.json is damaged (a value of the wrong type)",
                    "resume from another checkpoint, or --init-from " + dir + " for its weights alone");
  }
  return out;
}

void checkCheckpointBeforeLaunch(const std::string& dir, const TrainConfig& cfg, bool resume, const std::string& field) {
  checkCheckpointModel(dir, cfg, resume, field);
  if (!resume) return;
  const nlohmann::json s = stateOf(dir, field);
  if (s.is_null())
    throw UserError(field, dir + " holds weights but no trainscope state (trainscope/state.json), so there is nothing to resume",
                    "use --init-from " + dir + " to start from its weights with a fresh optimizer");
  try {
    checkResumeAgainst(s, dir, cfg, field);
  } catch (const nlohmann::json::exception&) {
    throw UserError(field, dir + "/trainscope/state.json is damaged (a value of the wrong type)",
                    "resume from another checkpoint, or --init-from " + dir + " for its weights alone");
  }
}

// The trainer state of a checkpoint whose weights are loaded: checked against this run, then read.
static void resumeState(const nlohmann::json& s, const std::string& dir, const TrainConfig& cfg, int rank,
                        const std::string& field, LoadedCheckpoint* loaded) {
  LoadedCheckpoint& out = *loaded;
  auto need = [&](bool ok, const std::string& what, const std::string& how) {
    if (!ok) throw UserError(field, dir + " was saved " + what, how);
  };
  const Trainer::Resumable counters = checkResumeAgainst(s, dir, cfg, field);  // the steps, data, optimizer, precision
  const nlohmann::json o = s.value("optimizer", nlohmann::json::object());
  const std::string kind = o.value("kind", "");
  const nlohmann::json saved_layout = s.value("layout", nlohmann::json::object());
  const bool replicated = o.value("files", "") == "replicated";
  const nlohmann::json now = layoutJson(cfg);
  // State that was whole on every rank (no ZeRO, tp, pp, ep) fits any data-parallel degree as it is.
  const bool whole = replicated || (saved_layout.value("zero", 0) == 0 && saved_layout.value("tp", 1) == 1 &&
                                    saved_layout.value("pp", 1) == 1 && saved_layout.value("ep", 1) == 1);
  const bool same_layout = whole ? optimizerReplicated(cfg) : saved_layout == now;
  const nlohmann::json per_parameter = o.value("per_parameter", nlohmann::json());
  if (!per_parameter.is_null() && same_layout && o.value("files", "") == "per-parameter") {
    out.per_parameter = per_parameter;  // cut exactly as saved: bit-identical
  } else if (!same_layout) {
    // Another layout: the optimizer state per parameter name, cut as this run cuts its weights
    // (Adafactor's factors and 8-bit Adam's blocks re-made from it: optim_state.h).
    const std::string why = kind == "adafactor" || kind == "adam8bit"
                                ? "it holds " + kind + "'s state per rank only (saved by an earlier version, which "
                                         "kept no per-parameter form of its factored moments or quantisation blocks)"
                                : "it holds no optimizer state per parameter (saved by an earlier version)";
    need(!per_parameter.is_null(),
         "with its optimizer state split over ranks as " + layoutText(saved_layout) + ", not as this run's " +
             layoutText(now) + ", and " + why,
         "resume under the same layout, or --init-from " + dir + " (weights only, fresh optimizer)");
    out.per_parameter = per_parameter;
    out.notice = conversionNotice(kind, saved_layout, cfg, field);
  } else if (replicated) {
    out.optimizer = readState(dir + "/" + kStateDir + "/optimizer.safetensors", field);
  } else {
    out.optimizer = readState(dir + "/" + kStateDir + "/optimizer-rank-" + std::to_string(rank) + ".safetensors", field);
  }
  // FP8's amax histories and scales, per parameter name: any layout maps them (fp8_state.h).
  out.fp8 = s.value("fp8", nlohmann::json());
  need(cfg.precision != Precision::FP8 || !out.fp8.is_null(),
       "in fp8 without its per-tensor scales (amax histories; an earlier version kept them per rank and did not save "
       "them), so the resumed run could not scale as the saved one would have",
       "--init-from " + dir + " (weights only, fresh optimizer and scales)");
  out.resumed = true;
  out.resumable = counters;
}

void restoreTrainer(const LoadedCheckpoint& c, Trainer& trainer, const Layout& layout, const std::string& dir,
                    const std::string& field) {
  try {
    if (!c.fp8.is_null()) loadFp8State(dir, c.fp8, trainer.config(), trainer, field);
  } catch (const nlohmann::json::exception&) {
    throw UserError(field, dir + "/trainscope/state.json is damaged (fp8)",
                    "resume from another checkpoint, or --init-from " + dir + " for its weights alone");
  }
  if (c.per_parameter.is_null()) {
    checkOptimizerState(c, trainer, dir, field);
    trainer.restore(c.resumable, c.optimizer);
    return;
  }
  try {
    loadLayoutFree(dir, c.per_parameter, trainer.config(), trainer, layout, field);
  } catch (const nlohmann::json::exception&) {
    throw UserError(field, dir + "/trainscope/state.json is damaged (optimizer.per_parameter)",
                    "resume from another checkpoint, or --init-from " + dir + " for its weights alone");
  }
  trainer.restore(c.resumable, trainer.optimizerState());  // the step, the loss scaler; the state is in
}

void checkOptimizerState(const LoadedCheckpoint& c, const Trainer& trainer, const std::string& dir,
                         const std::string& field) {
  const std::vector<at::Tensor> mine = trainer.optimizerState();
  bool ok = mine.size() == c.optimizer.size();
  for (size_t i = 0; ok && i < mine.size(); ++i)
    ok = mine[i].sizes() == c.optimizer[i].sizes() && mine[i].scalar_type() == c.optimizer[i].scalar_type();
  if (!ok)
    throw UserError(field, dir + "'s optimizer state does not fit this run's optimizer (" +
                               std::to_string(c.optimizer.size()) + " tensors saved, " + std::to_string(mine.size()) +
                               " here): another optimizer setting (momentum, block size) or layout",
                    "resume with the flags of the saved run, or --init-from " + dir + " for a fresh optimizer");
}

}  // namespace trainscope::runtime
