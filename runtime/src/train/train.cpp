// train.cpp — train(): one rank's run, in named phases (see train.h).
//
//   connect → open outputs (run database on rank 0, trace shard and sources on every rank)
//   → train the steps (gather every rank's step metrics; rank 0 records them)
//   → hand in collectives and the weight digest → close the trace and merge the shards → summary
#include "trainscope/runtime/train.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/version.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <atomic>
#include <csignal>
#include <pthread.h>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "state/checkpoint_dir.h"
#include "train/exchange.h"
#include "train/preflight.h"
#include "train/run_control.h"
#include "train/op_source.h"
#include "train/sources.h"
#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/safetensors.h"
#include "trainscope/rundb/merge.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/store.h"
#include "trainscope/runtime/comm.h"
#include "trainscope/runtime/data.h"
#include "trainscope/runtime/device.h"
#include "trainscope/runconfig/host.h"
#include "trainscope/runtime/launch.h"
#include "trainscope/runtime/parallel.h"
#include "trainscope/runtime/memory.h"
#include "trainscope/runtime/trainer.h"
#include "trainscope/models/memory_model.h"
#include "trainscope/tracer/cupti_source.h"
#include "trainscope/tracer/trace.h"

namespace trainscope::runtime {
namespace {

std::string hostName() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// Every rank's memory and time for the step, gathered to all (allGatherStep: one small all-gather,
// on the device when the group is NCCL's). Returns one row per rank.
// The same all-gather carries each rank's stop request (a signal it got), so that all ranks agree
// on the step after which they stop: `stop` becomes the first signal any rank got (0: none).
std::vector<rundb::Step> gatherStep(Comm& comm, const rundb::Step& r, const std::string& device, int* stop,
                                    std::vector<int>* signalled) {
  if (comm.layout().world == 1) {
    if (*stop != 0) signalled->push_back(0);
    return {r};
  }
  std::vector<rundb::Step> rows;
  int q = 0;
  for (const StepShare& share : allGatherStep(comm, r, *stop, device)) {
    rundb::Step& s = rows.emplace_back(share.step);
    s.rank = q;
    const int64_t request = share.stop_request;
    if (*stop == 0 && request != 0) *stop = int(request);  // every rank sees every rank's request
    if (request != 0 && !(request & kSentByLauncher)) signalled->push_back(q);
    s.tokens_per_s = s.step_time_ns > 0 ? double(s.tokens) / (double(s.step_time_ns) * 1e-9) : 0;
    // This rank's utilisation from its own step time (the FLOPs are the same share on every rank).
    const double ratio = s.step_time_ns > 0 ? double(r.step_time_ns) / double(s.step_time_ns) : 0.0;
    if (r.mfu) s.mfu = *r.mfu * ratio;
    if (r.hfu) s.hfu = *r.hfu * ratio;
    ++q;
  }
  return rows;
}

// What one rank records: the run database (rank 0) and its trace shard.
struct Recording {
  std::unique_ptr<rundb::RunStore> store;
  std::unique_ptr<tracer::Tracer> trace;
  CollectiveFeed* collectives = nullptr;  // owned by the tracer while it runs
  rundb::ClockSample clock_start;
  std::vector<rundb::ExpertLoad> expert_load;  // MoE: this rank's rows not yet handed to rank 0
  int64_t expert_load_handed = 0;              // hand-ins so far (each takes a key of its own)
  std::vector<rundb::Fp8Scale> fp8_scales;     // --precision fp8: likewise
  int64_t fp8_handed = 0;
  bool tracing_collectives() const { return collectives != nullptr; }
};

// The files a run reads: its run database never replaces one of them (files::OutputRule).
std::vector<std::string> runInputs(const TrainConfig& cfg) {
  std::vector<std::string> in;
  struct stat st {};
  for (const std::string& p : {cfg.data, cfg.workload})
    if (p != "synthetic" && ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) in.push_back(p);
  return in;
}

// The run database and, when tracing, the shards of `ranks` (rank 0 up): refused before anything is
// created, so that a shard path that is not ours (a user's file, a link) leaves no run database behind.
void checkOutputPaths(const TrainConfig& cfg, const RunOutput& out, int64_t ranks) {
  if (out.out.empty()) return;
  const std::vector<std::string> inputs = runInputs(cfg);
  rundb::checkWritable(out.out, out.overwrite, out.tracing() ? "--trace" : "--out", inputs);
  if (out.tracing())
    for (int64_t r = 0; r < ranks; ++r) rundb::checkWritable(rundb::shardPath(out.out, int(r)), true, "--trace", inputs);
}

Recording openOutputs(const TrainConfig& cfg, const RunOutput& out, const RunInfo& info, Comm& comm,
                      RunObserver* obs) {
  Recording rec;
  if (!out.out.empty() && info.leader) {
    const char* field = out.tracing() ? "--trace" : "--out";
    // Its own shard too (the launcher checked every rank's: validateBeforeLaunch; the others may be
    // opening theirs now).
    checkOutputPaths(cfg, out, info.rank + 1);
    rec.store = std::make_unique<rundb::RunStore>(out.out,
                                                  rundb::RunStore::Options{out.overwrite, field, false, runInputs(cfg)});
    // An earlier run's shards of ranks this run does not have would be taken for ours: remove them
    // (ranks below the world replace their own shard when they open it). Only our own, unlocked.
    for (const std::string& stale : rundb::leftoverShards(out.out)) {
      const rundb::PathCheck c = rundb::inspectPath(stale);
      if (rundb::shardRank(stale) >= cfg.world && c.kind == rundb::PathCheck::Kind::RunDatabase && !c.locked)
        rundb::removeRunDatabase(stale, field);
    }
  }
  // Tracing (after the data and --out checks, so bad input leaves no shard behind): each rank
  // writes its own shard; rank 0 merges them into the run database at the end.
  if (out.tracing()) {
    // The tracer has its own level type (with "off"): converted by name.
    const tracer::TraceLevel level = tracer::parseTraceLevel(toString(out.trace_level));
    rec.trace = std::make_unique<tracer::Tracer>(rundb::shardPath(out.out, info.rank), info.rank, level);
    tracer::Tracer::setCurrent(rec.trace.get());
    std::string why;
    rec.trace->addSource(std::make_unique<MemorySource>(), &why);
    auto feed = std::make_unique<CollectiveFeed>(comm.log());
    CollectiveFeed* feed_ptr = feed.get();
    if (rec.trace->addSource(std::move(feed), &why)) rec.collectives = feed_ptr;
    rec.trace->addSource(std::make_unique<OpSource>(out.trace_shapes), &why);
    if (info.device != "cpu" && !rec.trace->addSource(std::make_unique<tracer::CuptiSource>(tracer::makeCuptiApi()), &why) &&
        !why.empty() && info.leader && obs)
      obs->notice("notice: GPU activity not traced: " + why + "; host sources carry on");
    rec.clock_start = syncClock(comm, "start");
  }
  if (rec.store) {
    rundb::RunStore& s = *rec.store;
    s.setMeta("config", toJson(cfg));
    s.setMeta("host", hostName());
    s.setMeta("device", info.device);
    s.setMeta("device_name", info.device_name);
    s.setMeta("parameters", std::to_string(info.parameters));
    s.setMeta("libtorch_version", TORCH_VERSION);
    s.setMeta("world_size", std::to_string(cfg.world));
    s.setMeta("source", "run");
    s.setMeta("trace_level", out.tracing() ? toString(out.trace_level) : "off");
  }
  return rec;
}

void feedCollectives(Recording& rec) {
  if (rec.collectives) rec.collectives->drain();
}

// Collectives: without a trace, every rank hands its records to rank 0 through the rendezvous store
// (with one, they went into the rank's shard and arrive with the merge).
void handInCollectives(Recording& rec, Comm& comm) {
  feedCollectives(rec);
  if (rec.tracing_collectives()) return;
  const std::vector<CollectiveRecord> mine = comm.log().take();
  for (const auto& rows : gatherOnLeader(comm, "collectives", mine))
    if (rec.store) rec.store->appendCollectives(rows);
}

// MoE: every rank's expert_load rows to rank 0, which stores them; every kExpertLoadEvery steps and
// at the end, so that a long run holds at most that many steps of rows (layers x experts each) and
// a run that dies keeps most of them. Every rank calls it after the same steps.
constexpr int64_t kExpertLoadEvery = 64;
void handInExpertLoad(Recording& rec, Comm& comm, const TrainConfig& cfg) {
  if (!cfg.model.isMoe() || (!rec.store && cfg.world == 1)) return;
  const std::string key = "expert_load/" + std::to_string(rec.expert_load_handed++);
  for (const auto& rows : gatherOnLeader(comm, key, rec.expert_load))
    if (rec.store) rec.store->appendExpertLoad(rows);
  rec.expert_load.clear();
}

// --precision fp8: every rank's fp8_scales rows to rank 0, at the same points as expert_load.
void handInFp8Scales(Recording& rec, Comm& comm, const TrainConfig& cfg) {
  if (cfg.precision != Precision::FP8 || (!rec.store && cfg.world == 1)) return;
  const std::string key = "fp8_scales/" + std::to_string(rec.fp8_handed++);
  for (const auto& rows : gatherOnLeader(comm, key, rec.fp8_scales))
    if (rec.store) rec.store->appendFp8Scales(rows);
  rec.fp8_scales.clear();
}

// Final weights digest: ranks of DP replica 0 (and CP rank 0) hand in their parts, rank 0 sums by name.
void writeDigest(Recording& rec, Comm& comm, Trainer& trainer, const TrainConfig& cfg, const Layout& layout) {
  if (!rec.store && cfg.world == 1) return;
  std::vector<rundb::WeightDigest> mine;
  if (layout.cp_rank == 0)  // which DP ranks hand in: Trainer::weightDigest (one replica, or ZeRO-3's shards)
    for (const auto& e : trainer.weightDigest()) mine.push_back({e.name, e.sum, e.sumsq, e.abssum});
  const std::vector<std::vector<rundb::WeightDigest>> parts = gatherOnLeader(comm, "digest", mine);
  if (!rec.store) return;
  std::map<std::string, rundb::WeightDigest> total;
  for (const auto& part : parts)
    for (const rundb::WeightDigest& e : part) {
      rundb::WeightDigest& t = total[e.name];
      t.name = e.name;
      t.sum += e.sum;
      t.sumsq += e.sumsq;
      t.abssum += e.abssum;
    }
  std::vector<rundb::WeightDigest> rows;
  for (auto& [name, t] : total) rows.push_back(t);
  rec.store->writeWeightDigest(rows);
}

// Closes this rank's shard and, on rank 0, merges every rank's into the run database. Whatever fails
// here, every rank still reaches the same barriers (a rank that skipped one would leave the others
// waiting); failures come back as warnings: the run's steps are recorded already.
std::vector<std::string> finishTrace(Recording& rec, Comm& comm, const TrainConfig& cfg, const RunInfo& info) {
  std::vector<std::string> warnings;
  if (!rec.trace) return warnings;
  const rundb::ClockSample clock_end = syncClock(comm, "end");
  tracer::Tracer::setCurrent(nullptr);
  rec.collectives = nullptr;
  bool closed = true;
  try {
    rec.trace->setMeta("rank", std::to_string(info.rank));
    rec.trace->close();  // stops the sources: the op callbacks, CUPTI's buffers, the collective feed
  } catch (const std::exception& e) {
    closed = false;
    warnings.push_back("rank " + std::to_string(info.rank) + "'s trace shard could not be closed: " + e.what());
  }
  rundb::ShardInfo me;
  me.path = closed ? rec.trace->path() : std::string();  // empty: rank 0 leaves this rank's shard out
  me.rank = info.rank;
  me.host = hostName();
  me.device = info.device;
  me.pid = getpid();
  me.offset_start_ns = rec.clock_start.offset_ns;
  me.offset_end_ns = clock_end.offset_ns;
  const std::vector<std::vector<rundb::ShardInfo>> parts = gatherOnLeader(comm, "shard", std::vector{me});
  if (rec.store) {
    try {
      if (cfg.inject_failure == "merge") TRAINSCOPE_THROW("injected failure while merging the trace shards");
      std::vector<rundb::ShardInfo> shards;
      for (const auto& part : parts)
        for (const rundb::ShardInfo& s : part)
          if (!s.path.empty()) shards.push_back(s);  // else that rank's shard could not be closed
      rundb::mergeShards(*rec.store, shards);
    } catch (const std::exception& e) {
      warnings.push_back(std::string("the trace could not be finalised: ") + e.what() + "; the steps are in " +
                         rec.store->path());
    }
  }
  if (cfg.world > 1) comm.world().barrier();  // no rank exits while rank 0 still reads its shard
  return warnings;
}

// --inject-failure close: the close fails for real, as when the disk fills or fails just then. While
// SQLite folds the write-ahead log into the database, the file-size limit (RLIMIT_FSIZE) is 512
// bytes, below the file's size: its first write fails (EFBIG, or a short write, which SQLite reports
// as SQLITE_FULL, as on a full disk), the log stays, and nothing of the run is lost.
void closeAsOnAFullDisk(rundb::RunStore& store) {
  rlimit old{};
  getrlimit(RLIMIT_FSIZE, &old);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails instead of killing
  rlimit lowered = old;
  lowered.rlim_cur = 512;
  setrlimit(RLIMIT_FSIZE, &lowered);
  try {
    store.close();
  } catch (...) {
    setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    throw;
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
}

// What one rank's run works with once the ranks are connected.
struct RunContext {
  const TrainConfig& cfg;
  const RunInfo& info;
  const DeviceChoice& dev;
  Comm& comm;
  Trainer& trainer;
  Recording& rec;
  RunObserver* obs;
  std::optional<double> peak_flops;  // FLOP/s (--peak-tflops, else the device's), for MFU
};

// What the steps add up to, for the result and the summary.
struct StepTotals {
  std::vector<rundb::Step> all_rows;  // rank 0: every rank's rows (the summary when there is no database)
  int64_t nonfinite_streak = 0, timed = 0;
  int64_t tensor_peak = 0;  // this rank's largest step peak (bytes tensors held)
  double hidden_sum = 0, comm_sum = 0;
};

constexpr int64_t kMaxNonFiniteSteps = 5;  // fp32/bf16: this many non-finite steps in a row mean divergence

// RunEnd::Stopped after `step`, by the first signal any rank got (`stop`). The ranks it was sent to
// are named unless it reached all of them (the launcher's or the terminal's): a signal to rank 1 is
// not rank 0's doing.
void endStopped(int stop, const std::vector<int>& signalled, int world, int64_t step, RunResult* res) {
  res->end = RunEnd::Stopped;
  res->stop_signal = stop & ~kSentByLauncher;
  std::string to;
  if (world > 1 && !signalled.empty() && int(signalled.size()) < world) {
    for (size_t i = 0; i < signalled.size(); ++i)
      to += (i ? (i + 1 == signalled.size() ? " and " : ", ") : "") + std::to_string(signalled[i]);
    to = std::string(" sent to rank") + (signalled.size() > 1 ? "s " : " ") + to;
    res->stop_ranks = signalled;
  }
  res->message = std::string("stopped by ") + strsignal(res->stop_signal) + to + " after step " + std::to_string(step);
}

// Step k: train it, gather every rank's metrics (and stop requests), record them. Returns whether
// the run goes on (false: it diverged or was stopped, as `res` says).
bool runStep(RunContext& c, int64_t k, StepTotals* t, RunResult* res) {
  if (injectedFailure(c.cfg.inject_failure, int(c.info.rank), k))
    TRAINSCOPE_THROW("injected failure on rank " + std::to_string(c.info.rank) + " at step " + std::to_string(k));
  rundb::Step r;
  {
    TRAINSCOPE_RANGE(tracer::names::kStep);
    r = c.trainer.step();
  }
  feedCollectives(c.rec);
  for (rundb::ExpertLoad& e : c.trainer.takeExpertLoad()) c.rec.expert_load.push_back(e);
  for (rundb::Fp8Scale& e : c.trainer.takeFp8Scales()) c.rec.fp8_scales.push_back(std::move(e));
  if ((k + 1) % kExpertLoadEvery == 0 && k + 1 < c.cfg.steps) {
    handInExpertLoad(c.rec, c.comm, c.cfg);
    handInFp8Scales(c.rec, c.comm, c.cfg);
  }
  int stop = stopRequest();
  std::vector<int> signalled;  // the ranks a signal reached directly (not forwarded by the launcher)
  const std::vector<rundb::Step> rows = gatherStep(c.comm, r, c.dev.device, &stop, &signalled);
  if (c.rec.store)
    for (const auto& row : rows) c.rec.store->appendStep(row);
  if (c.info.leader) t->all_rows.insert(t->all_rows.end(), rows.begin(), rows.end());
  if (k == res->first_step) res->first_loss = r.loss;  // (a resumed run's first step is k > 0)
  // This invocation's first step pays one-time costs (a resumed run's too, at k > 0).
  if (k > res->first_step || c.cfg.steps - res->first_step == 1) {
    t->hidden_sum += c.trainer.lastHiddenShare();
    t->comm_sum += c.trainer.lastCommSeconds();
    ++t->timed;
  }
  t->tensor_peak = std::max(t->tensor_peak, r.peak_bytes);
  res->skipped_steps += r.skipped;
  res->last = r;
  res->steps_done = k + 1;
  if (c.obs) c.obs->stepDone(c.info, r);
  t->nonfinite_streak = (r.skipped && c.cfg.precision != Precision::FP16) ? t->nonfinite_streak + 1 : 0;
  if (t->nonfinite_streak >= kMaxNonFiniteSteps) {
    res->end = RunEnd::Diverged;
    res->message = "training diverged: the gradient norm was not finite for " + std::to_string(kMaxNonFiniteSteps) +
                   " steps in a row (last step " + std::to_string(r.step) + "); lower --lr or use --clip" +
                   (c.rec.store ? "; steps so far are in " + c.rec.store->path() : "");
    return false;
  }
  if (stop != 0) {
    endStopped(stop, signalled, c.cfg.world, r.step, res);
    return false;
  }
  return true;
}

// This rank's memory besides its tensors, measured (docs/memory-model.md, "The process"): the peak
// resident set (VmHWM since the run began) less the tensors' peak; rank 0's goes into the run
// database's meta and the result (--json).
void recordProcessMemory(RunContext& c, const StepTotals& t, int64_t resident_at_start, RunResult* res) {
  const ResidentMemory m = residentMemory();
  res->resident_start_bytes = resident_at_start;
  res->resident_peak_bytes = m.peak;
  res->tensor_peak_bytes = t.tensor_peak;
  res->non_tensor_bytes = m.peak > 0 ? std::max<int64_t>(0, m.peak - t.tensor_peak) : 0;
  if (!c.rec.store || m.peak <= 0) return;
  c.rec.store->setMeta("resident_start_bytes", std::to_string(res->resident_start_bytes));
  c.rec.store->setMeta("resident_peak_bytes", std::to_string(res->resident_peak_bytes));
  c.rec.store->setMeta("non_tensor_bytes", std::to_string(res->non_tensor_bytes));
}

// Closes the run database and reads the summary back (rank 0); without a database, the summary
// comes from the rows gathered at each step.
void closeAndSummarize(RunContext& c, const StepTotals& t, RunResult* res) {
  const TrainConfig& cfg = c.cfg;
  if (!c.rec.store) {
    if (c.info.leader) res->summary = rundb::summarizeSteps(t.all_rows, cfg.world, cfg.model.name, c.peak_flops);
    return;
  }
  // Every step is in the database already (each appendStep commits): a close that fails (a full
  // disk while the write-ahead log is folded in) is a warning, as a failed trace merge is. What
  // the log holds is read back by the next reader; the summary then comes from that, or from the
  // rows gathered here.
  res->database = c.rec.store->path();
  bool closed = true;
  try {
    if (cfg.inject_failure == "close") closeAsOnAFullDisk(*c.rec.store);
    else c.rec.store->close();
  } catch (const std::exception& e) {
    closed = false;
    res->warnings.push_back(std::string("the run database could not be closed cleanly: ") + userFacing(e.what()) +
                            "; its " + std::to_string(res->steps_done) + " steps were written before, and " +
                            res->database + " keeps them in its write-ahead log (" + res->database +
                            "-wal): keep both files together");
  }
  try {
    rundb::RunReader reader(res->database);
    res->summary = rundb::summarize(reader);
  } catch (const std::exception& e) {
    if (closed) throw;
    res->summary = rundb::summarizeSteps(t.all_rows, cfg.world, cfg.model.name, c.peak_flops);
  }
}

// The run proper, once the ranks are connected: open the outputs, train the steps, hand in what
// rank 0 records at the end, close.
RunResult trainOnComm(TrainConfig& cfg, const RunOutput& out, RunInfo info, const Layout& layout,
                      const DeviceChoice& dev, Comm& comm, RunObserver* obs, int64_t resident_at_start) {
  // --resume / --init-from: the whole model from the checkpoint; each rank keeps its part of it.
  const std::string from = !out.resume.empty() ? out.resume : out.init_from;
  const std::string from_flag = !out.resume.empty() ? "--resume" : "--init-from";
  std::optional<LoadedCheckpoint> loaded;
  if (!from.empty()) loaded = loadCheckpoint(from, cfg, layout.rank, !out.resume.empty(), from_flag);
  Trainer trainer(cfg, dev, &comm, loaded ? &loaded->full : nullptr);  // checks the data before anything is written
  if (loaded && loaded->resumed) restoreTrainer(*loaded, trainer, layout, from, from_flag);
  const std::string resume_notice = loaded && layout.rank == 0 ? loaded->notice : std::string();
  loaded.reset();
  if (!out.dump_logits.empty()) {  // before any step: the weights the run starts from
    if (layout.world != 1)
      throw UserError("--dump-logits", "needs one process (it writes one model's logits)", "drop --nproc");
    const at::Tensor lg = trainer.logits(trainer.stepsDone());
    // Under a temporary name, put in place when whole (never over a file, never through a link).
    files::OutputRule rule;
    rule.field = "--dump-logits";
    rule.kind = "logits file";
    files::AtomicFile f(out.dump_logits, rule);
    const std::vector<safetensors::TensorView> views = {
        {"logits", "F32", lg.sizes().vec(), lg.data_ptr(), int64_t(lg.nbytes())}};
    f.stream() << safetensors::header(views, {{"step", std::to_string(trainer.stepsDone())}});
    f.stream().write(static_cast<const char*>(lg.data_ptr()), std::streamsize(lg.nbytes()));
    f.commit();
  }
  info.parameters = cfg.model.parameterCount();
  if (layout.world == 1 && trainer.parameterCount() != info.parameters)
    TRAINSCOPE_THROW("parameter count " + std::to_string(trainer.parameterCount()) + " differs from the analytic " +
                     std::to_string(info.parameters));
  Recording rec = openOutputs(cfg, out, info, comm, obs);
  const std::optional<double> peak_tflops = cfg.peak_tflops ? cfg.peak_tflops : dev.peak_tflops;
  if (rec.store && peak_tflops) rec.store->setMeta("peak_flops", std::to_string(*peak_tflops * 1e12));
  if (obs) obs->started(info);
  const std::optional<double> peak_flops = peak_tflops ? std::optional<double>(*peak_tflops * 1e12) : std::nullopt;
  RunContext c{cfg, info, dev, comm, trainer, rec, obs, peak_flops};

  RunResult res;
  res.info = info;
  res.info.config = nullptr;
  res.config = cfg;
  if (!resume_notice.empty()) res.warnings.push_back(resume_notice);  // another layout, not exact (why)
  StepTotals totals;
  auto save = [&] {
    const SavedCheckpoint s = saveCheckpoint(out.save, cfg, trainer, comm, out.save_shard_bytes,
                                             cfg.inject_failure == "save");
    if (rec.store) rec.store->appendCheckpoint({s.step, s.seconds, s.bytes, out.save});
    res.checkpoints.push_back({s.step, s.seconds, s.bytes, out.save});
  };
  res.first_step = res.steps_done = trainer.stepsDone();
  for (int64_t k = res.first_step; k < cfg.steps; ++k) {
    if (!runStep(c, k, &totals, &res)) {
      if (res.end == RunEnd::Diverged) return res;
      break;
    }
    if (!out.save.empty() && out.save_every > 0 && (k + 1) % out.save_every == 0 && k + 1 < cfg.steps) save();
  }
  if (!out.save.empty()) save();  // at the end, or after the step a stop signal ended
  handInCollectives(rec, comm);
  handInExpertLoad(rec, comm, cfg);
  handInFp8Scales(rec, comm, cfg);
  writeDigest(rec, comm, trainer, cfg, layout);
  for (auto& w : finishTrace(rec, comm, cfg, info)) res.warnings.push_back(std::move(w));

  res.final_loss = res.last.loss;
  res.loss_scale = trainer.lossScale();
  res.allreduce_hidden_share = totals.timed ? totals.hidden_sum / double(totals.timed) : 0.0;
  res.grad_comm_s_per_step = totals.timed ? totals.comm_sum / double(totals.timed) : 0.0;
  recordProcessMemory(c, totals, resident_at_start, &res);
  closeAndSummarize(c, totals, &res);
  return res;
}

}  // namespace

// --save: refused before anything runs when the layout cannot save or DIR is not ours to write.
static void checkSave(const TrainConfig& cfg, const RunOutput& out) {
  if (out.save.empty()) return;
  if (const std::string why = whyCannotSave(cfg); !why.empty())
    throw UserError("--save", why, "drop --save, or run a layout that can save");
  checkCheckpointTarget(out.save, "--save");
}

bool isRankProcess() { return rankEnvFromEnvironment().distributed; }

void validateBeforeLaunch(TrainConfig cfg, RunOutput out) {
  resolve(cfg, cfg.nproc);
  resolve(out);
  checkSave(cfg, out);
  Layout::make(cfg.world, 0, cfg.tp, cfg.pp, cfg.cp);
  // A checkpoint the run cannot start from or continue (another model, --steps not past its step,
  // other data or optimizer): refused here once, not by every rank after it has started.
  if (!out.resume.empty()) checkCheckpointBeforeLaunch(out.resume, cfg, true, "--resume");
  else if (!out.init_from.empty()) checkCheckpointBeforeLaunch(out.init_from, cfg, false, "--init-from");
  TokenSource probe(cfg.data, cfg.model.vocab_size, cfg.seq, cfg.seed);
  (void)probe;
  if (cfg.launcher == Launcher::Local) {
    for (int s = 0; s < cfg.pp; ++s) checkMemoryFits(cfg, s, cfg.world, cfg.device != DeviceRequest::CUDA);
    checkTasksFit(cfg, cfg.world);
  }
  checkOutputPaths(cfg, out, cfg.world);
}

RunResult train(TrainConfig cfg, RunOutput out, RunObserver* obs) {
  StopSignals signals;  // before any thread starts: they inherit the blocked signals
  const RankEnv env = rankEnvFromEnvironment();
  resolve(cfg, env.distributed ? env.world : 1);
  resolve(out);
  checkSave(cfg, out);
  const Layout layout = Layout::make(cfg.world, env.rank, cfg.tp, cfg.pp, cfg.cp);
  resetPeakResident();  // VmHWM from here: this run's peak, not an earlier one's in this process
  const int64_t resident_at_start = residentMemory().now;
  const MemoryFit fit = checkMemoryFits(cfg, layout.pp_rank, env.local_world, cfg.device != DeviceRequest::CUDA);
  if (!env.distributed) checkTasksFit(cfg, 1);  // the launcher checked its ranks' (validateBeforeLaunch)
  RunInfo info;
  info.config = &cfg;
  info.rank = env.rank;
  info.leader = env.rank == 0;
  info.rank_source = env.source;
  // Ranks on one host share its cores.
  if (cfg.threads > 0) at::set_num_threads(cfg.threads);
  else if (env.local_world > 1)
    at::set_num_threads(std::max(1u, std::thread::hardware_concurrency() / unsigned(env.local_world)));
  DeviceChoice dev = chooseDevice(cfg.device, cfg.precision);
  if (dev.device != "cpu") {  // the rank's own GPU, made current before any CUDA work or NCCL group
    // A scheduler that binds one GPU to each task (Slurm's --gpus-per-task=1, --gpu-bind) leaves the
    // process one visible device, named alone in CUDA_VISIBLE_DEVICES: that one is the rank's.
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    const bool bound_alone = dev.cuda_devices == 1 && visible && *visible && !std::strchr(visible, ',');
    const int64_t index = bound_alone ? 0 : env.local_rank;
    if (index >= dev.cuda_devices) {
      throw UserError("--device", "rank " + std::to_string(env.rank) + " is local rank " + std::to_string(env.local_rank) +
                                      " but this process sees " + std::to_string(dev.cuda_devices) + " GPU(s)" +
                                      (visible ? " (CUDA_VISIBLE_DEVICES=" + std::string(visible) + ")" : ""),
                      "start at most as many ranks per node as it has GPUs, each seeing all of them, or bind one GPU to "
                      "each rank (CUDA_VISIBLE_DEVICES naming that one alone)");
    }
    dev.device = "cuda:" + std::to_string(index);
    setCurrentCudaDevice(int(index));
  }
  info.device = dev.device;
  info.device_name = dev.name;
  if (!dev.notice.empty() && info.leader && obs) obs->notice(dev.notice);
  if (info.leader && obs)
    for (const std::string& n : cfg.model.notes) obs->notice("note: " + n);

  CommOptions copts;
  copts.device = dev.device;
  copts.rendezvous_timeout = std::chrono::milliseconds(int64_t(cfg.rendezvous_timeout_s * 1000));
  copts.collective_timeout = std::chrono::milliseconds(int64_t(cfg.collective_timeout_s * 1000));
  std::unique_ptr<Comm> comm = Comm::connect(env, layout, copts);
  struct LimitScope {  // --mem-limit and the cache's bound hold for this run only (tests train several in one process)
    LimitScope(int64_t b, int64_t cache) {
      installCountingCpuAllocator();
      setCpuMemoryLimit(b);
      setCpuCacheLimit(cache);
    }
    ~LimitScope() {
      setCpuMemoryLimit(0);
      setCpuCacheLimit(std::numeric_limits<int64_t>::max());
    }
  } limit(dev.device == "cpu" ? cfg.mem_limit : 0,
          // Freed blocks kept for reuse are resident too: under a host limit, only the room the model leaves.
          // (--mem-limit bounds the tensors alone: the cache stays as it is.)
          cfg.mem_limit == 0 && fit.available > 0 && fit.need > 0 ? fit.available - fit.need
                                                                   : std::numeric_limits<int64_t>::max());
  // A rank's own failure is reported before its process groups close, so that the launcher can tell
  // it from the peers' "connection closed" errors that it causes.
  try {
    return trainOnComm(cfg, out, info, layout, dev, *comm, obs, resident_at_start);
  } catch (const c10::OutOfMemoryError& e) {
    // Out of memory, on the CPU under --mem-limit or on a GPU: one line with the bytes.
    const CpuRefusal r = lastCpuRefusal();
    const bool cpu = dev.device == "cpu";
    std::string what = e.what_without_backtrace();
    what = what.substr(0, what.find('\n'));
    const std::string msg = "out of memory on rank " + std::to_string(env.rank) + ": " + what;
    reportRankError(msg);
    throw OutOfMemory(msg, cpu ? r.requested : 0, cpu ? r.in_use : 0, cpu ? cfg.mem_limit : 0);
  } catch (const c10::Error& e) {
    // LibTorch's what() carries a C++ backtrace: the sentence before it is the message.
    const std::string msg = e.what_without_backtrace();
    reportRankError(msg);
    throw std::runtime_error(msg);
  } catch (const std::exception& e) {
    reportRankError(e.what());
    throw;
  }
}

}  // namespace trainscope::runtime
