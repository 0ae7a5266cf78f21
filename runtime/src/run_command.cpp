// run_command.cpp — `trainscope run` in one rank process (or the only process).
#include "trainscope/runtime/run_command.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/version.h>

#include <algorithm>
#include <array>
#include <map>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <memory>
#include <ostream>
#include <sstream>
#include <thread>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/runtime/comm.h"
#include "trainscope/runtime/launch.h"
#include "trainscope/runtime/data.h"
#include "trainscope/runtime/device.h"
#include "trainscope/runtime/parallel.h"
#include "trainscope/runtime/trainer.h"
#include "trainscope/tracer/cupti_source.h"
#include "trainscope/tracer/merge.h"
#include "trainscope/tracer/range_names.h"
#include "trainscope/tracer/run_store.h"
#include "trainscope/tracer/trace.h"
#include "op_source.h"

namespace trainscope::runtime {
namespace {

std::string mib(int64_t bytes) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << double(bytes) / (1024.0 * 1024.0) << " MiB";
  return s.str();
}

std::string hostName() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// "RANK:STEP" → that rank throws at that step (tests the launcher's failure handling).
bool injectedFailure(const std::string& spec, int rank, int64_t step) {
  if (spec.empty()) return false;
  int r = -1;
  long long k = -1;
  char tail = 0;
  if (std::sscanf(spec.c_str(), "%d:%lld%c", &r, &k, &tail) != 2 || r < 0 || k < 0)
    throw UserError("--inject-failure", "expects RANK:STEP, got \"" + spec + "\"", "e.g. --inject-failure 1:2");
  return r == rank && k == step;
}

// Every rank's memory and time for the step, gathered to all (one small all-gather; on the device
// when the group is NCCL's).
constexpr int kPerRank = 7;
std::vector<int64_t> gatherStepStats(Comm& comm, const tracer::StepRecord& r, const std::string& device) {
  at::Tensor mine = at::tensor(std::vector<int64_t>{r.peak_bytes, r.param_bytes, r.grad_bytes, r.optim_bytes,
                                                    r.activation_bytes, r.step_time_ns, r.start_ns});
  if (comm.layout().world == 1) return {mine.data_ptr<int64_t>(), mine.data_ptr<int64_t>() + kPerRank};
  mine = mine.to(at::Device(device));
  at::Tensor all = at::empty({comm.layout().world * kPerRank}, mine.options());
  comm.world().allGather(all, mine);
  all = all.cpu();
  return {all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + all.numel()};
}

std::string collectivesJson(const std::vector<CollectiveRecord>& recs) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& r : recs)
    a.push_back({r.op, r.group, r.rank, r.group_size, r.seq, r.bytes, r.start_ns, r.end_ns});
  return a.dump();
}

void appendCollectives(tracer::RunStore& store, const std::string& json) {
  std::vector<tracer::CollectiveRow> rows;
  for (const auto& e : nlohmann::json::parse(json)) {
    CollectiveRecord c;
    c.op = e[0];
    c.group = e[1];
    c.rank = e[2];
    c.group_size = e[3];
    c.seq = e[4];
    c.bytes = e[5];
    c.start_ns = e[6];
    c.end_ns = e[7];
    rows.push_back({c.rank, c.op, c.group, c.group_size, c.seq, c.bytes, c.start_ns, c.end_ns, c.algbw(), c.busbw()});
  }
  store.appendCollectives(rows);
}

// Clock offset of this rank against rank 0, NTP-style through the rendezvous store: rank 0 answers
// each ping with its clock. Rank 0's own offset is 0.
tracer::ClockSample syncClock(Comm& comm, const std::string& tag, int rounds = 8) {
  const Layout& l = comm.layout();
  if (l.world == 1) return {};
  const std::string base = "clock/" + tag + "/";
  if (l.rank == 0) {
    for (int r = 1; r < l.world; ++r)
      for (int i = 0; i < rounds; ++i) {
        const std::string k = base + std::to_string(r) + "/" + std::to_string(i);
        comm.storeGet(k + "/ping");
        comm.storeSet(k + "/pong", std::to_string(tracer::nowNs()));
      }
    return {};
  }
  int i = 0;
  return tracer::measureClockOffset(
      [&] {
        const std::string k = base + std::to_string(l.rank) + "/" + std::to_string(i++);
        comm.storeSet(k + "/ping", "1");
        return std::stoll(comm.storeGet(k + "/pong"));
      },
      rounds);
}

}  // namespace

bool isRankProcess() { return rankEnvFromEnvironment().distributed; }

void validateBeforeLaunch(TrainConfig cfg) {
  resolve(cfg, cfg.nproc);
  Layout::make(cfg.world, 0, cfg.tp, cfg.pp);
  if (cfg.sequence_parallel && cfg.seq % cfg.tp != 0)
    throw UserError("--seq", "sequence parallelism needs seq divisible by tp", "pick --seq a multiple of --tp");
  TokenSource probe(cfg.data, cfg.model.vocab_size, cfg.seq, cfg.seed);
  (void)probe;
  if (!cfg.out.empty() && !cfg.overwrite && std::ifstream(cfg.out).good())
    throw UserError("--out", cfg.out + " already exists", "choose another path or pass --overwrite");
}

namespace {

// The run proper, once the ranks are connected.
int trainOnComm(TrainConfig& cfg, const RankEnv& env, const Layout& layout, const DeviceChoice& dev, Comm& comm,
                std::ostream& out, std::ostream& err) {
  const bool leader = env.rank == 0;

  Trainer trainer(cfg, dev, &comm);  // checks the data before anything is written
  std::unique_ptr<tracer::RunStore> store;
  if (!cfg.out.empty() && leader) store = std::make_unique<tracer::RunStore>(cfg.out, cfg.overwrite);
  // Tracing (after the data and --out checks, so bad input leaves no shard behind): each rank
  // writes its own shard; rank 0 merges them into the run database at the end.
  std::unique_ptr<tracer::Tracer> trace;
  std::unique_ptr<OpSource> ops;
  std::unique_ptr<tracer::CuptiSource> cupti;
  tracer::ClockSample clock_start;
  if (!cfg.trace.empty()) {
    const tracer::TraceLevel level = tracer::parseTraceLevel(cfg.trace_level);
    trace = std::make_unique<tracer::Tracer>(cfg.out + ".rank" + std::to_string(env.rank), env.rank, level);
    tracer::Tracer::setCurrent(trace.get());
    if (level >= tracer::TraceLevel::Ops) ops = std::make_unique<OpSource>(*trace, cfg.trace_shapes);
    if (level >= tracer::TraceLevel::All && dev.device != "cpu") {
      cupti = std::make_unique<tracer::CuptiSource>(*trace, tracer::makeCuptiApi());
      std::string why;
      if (!cupti->start(&why)) {
        if (leader) err << "notice: GPU activity not traced: " << why << "; host sources carry on\n";
        cupti.reset();
      }
    }
    clock_start = syncClock(comm, "start");
  }

  const bool tracing_collectives = trace && trace->enabled(tracer::TraceLevel::Ranges);
  const int64_t params = cfg.model.parameterCount();
  if (layout.world == 1 && trainer.parameterCount() != params) {
    err << "error: parameter count " << trainer.parameterCount() << " differs from the analytic " << params << "\n";
    return 1;
  }
  if (!cfg.quiet) {
    out << "trainscope run: " << cfg.model.name << " (L=" << cfg.model.n_layer << " NH=" << cfg.model.n_head
        << " C=" << cfg.model.n_embd << " V=" << cfg.model.vocab_size << "), " << params << " parameters\n"
        << "  batch: seq " << cfg.seq << ", mbs " << cfg.mbs << " x ga " << cfg.ga_steps << " x dp " << cfg.dp
        << " = gbs " << cfg.global_batch << " (" << cfg.tokensPerStep() << " tokens/step); ckpt "
        << toString(cfg.ckpt) << ", " << toString(cfg.precision) << ", " << toString(cfg.optimizer) << "\n";
    if (cfg.world > 1)
      out << "  parallel: " << cfg.world << " ranks = dp " << cfg.dp << " x tp " << cfg.tp << " x pp " << cfg.pp
          << (cfg.sequence_parallel ? ", sequence parallel" : "") << (cfg.zero ? ", ZeRO-1" : "")
          << (cfg.pp > 1 ? std::string(", ") + toString(cfg.pp_schedule) : "")
          << (cfg.local_sgd ? ", local SGD H=" + std::to_string(cfg.local_sgd) : "") << " (" << env.source << ")\n";
    out << "  device: " << dev.name << "; data: " << cfg.data << "\n";
  }
  if (store) {
    store->setMeta("config", toJson(cfg));
    store->setMeta("host", hostName());
    store->setMeta("device", dev.device);
    store->setMeta("device_name", dev.name);
    store->setMeta("parameters", std::to_string(params));
    store->setMeta("libtorch_version", TORCH_VERSION);
    store->setMeta("world_size", std::to_string(cfg.world));
  }

  tracer::StepRecord last;
  std::vector<double> step_times;  // seconds, steps after the first
  double time_sum = 0, tok_sum = 0, hidden_sum = 0, comm_sum = 0;
  int64_t peak = 0, timed = 0, skipped = 0;
  double first_loss = 0;
  int64_t nonfinite_streak = 0;
  constexpr int64_t kMaxNonFiniteSteps = 5;  // fp32/bf16: this many in a row means divergence
  for (int64_t k = 0; k < cfg.steps; ++k) {
    if (injectedFailure(cfg.inject_failure, env.rank, k))
      TRAINSCOPE_THROW("injected failure on rank " + std::to_string(env.rank) + " at step " + std::to_string(k));
    tracer::StepRecord r;
    {
      TRAINSCOPE_RANGE(tracer::names::kStep);
      r = trainer.step();
    }
    if (tracing_collectives)
      for (const auto& c : comm.log().take())
        trace->record(tracer::CollectiveEvent{c.op, c.group, c.group_size, c.seq, c.bytes, c.start_ns, c.end_ns,
                                              c.algbw(), c.busbw()});
    const std::vector<int64_t> all = gatherStepStats(comm, r, dev.device);
    if (store) {
      for (int q = 0; q < cfg.world; ++q) {
        tracer::StepRecord rq = r;
        rq.rank = q;
        const int64_t* v = &all[q * kPerRank];
        rq.peak_bytes = v[0], rq.param_bytes = v[1], rq.grad_bytes = v[2], rq.optim_bytes = v[3];
        rq.activation_bytes = v[4], rq.step_time_ns = v[5], rq.start_ns = v[6];
        store->appendStep(rq);
      }
    }
    if (k == 0) first_loss = r.loss;
    if (k > 0 || cfg.steps == 1) {  // step 0 pays one-time costs; keep it out of the averages
      time_sum += double(r.step_time_ns) * 1e-9;
      tok_sum += double(r.tokens);
      step_times.push_back(double(r.step_time_ns) * 1e-9);
      hidden_sum += trainer.lastHiddenShare();
      comm_sum += trainer.lastCommSeconds();
      ++timed;
    }
    for (int q = 0; q < cfg.world; ++q) peak = std::max(peak, all[q * kPerRank]);
    skipped += r.skipped;
    if (!cfg.quiet) {
      char line[320];
      std::snprintf(line, sizeof(line), "step %4lld | loss %.6f | lr %.3e | norm %.4f | %7.1f ms | %9.0f tok/s%s%s",
                    static_cast<long long>(r.step), r.loss, r.lr, r.grad_norm, double(r.step_time_ns) * 1e-6,
                    r.tokens_per_s, r.mfu ? (" | MFU " + std::to_string(*r.mfu * 100).substr(0, 5) + "%").c_str() : "",
                    !r.skipped ? "" : cfg.precision == Precision::FP16 ? " | skipped (fp16 overflow)"
                                                                       : " | skipped (non-finite gradient)");
      out << line << "\n";
    }
    last = r;
    nonfinite_streak = (r.skipped && cfg.precision != Precision::FP16) ? nonfinite_streak + 1 : 0;
    if (nonfinite_streak >= kMaxNonFiniteSteps) {
      err << "error: training diverged: the gradient norm was not finite for " << kMaxNonFiniteSteps
          << " steps in a row (last step " << r.step << "); lower --lr or use --clip"
          << (store ? "; steps so far are in " + store->path() : "") << "\n";
      return 1;
    }
  }

  // Collectives: every rank hands its records to rank 0 through the rendezvous store (when tracing,
  // they went into the rank's shard instead, and arrive with the merge below).
  std::vector<CollectiveRecord> mine = comm.log().take();
  if (tracing_collectives)
    for (const auto& c : mine)
      trace->record(tracer::CollectiveEvent{c.op, c.group, c.group_size, c.seq, c.bytes, c.start_ns, c.end_ns, c.algbw(),
                                            c.busbw()});
  if (cfg.world > 1 && !tracing_collectives) {
    comm.storeSet("collectives/" + std::to_string(env.rank), collectivesJson(mine));
    comm.world().barrier();
    if (store)
      for (int q = 0; q < cfg.world; ++q) appendCollectives(*store, comm.storeGet("collectives/" + std::to_string(q)));
  }

  // Final weights digest: ranks of DP replica 0 hand in their parts, rank 0 sums by name.
  if (store || cfg.world > 1) {
    nlohmann::json d = nlohmann::json::array();
    if (layout.dp_rank == 0)
      for (const auto& e : trainer.weightDigest()) d.push_back({e.name, e.sum, e.sumsq, e.abssum});
    if (cfg.world > 1) comm.storeSet("digest/" + std::to_string(env.rank), d.dump());
    if (cfg.world > 1) comm.world().barrier();
    if (store) {
      std::map<std::string, std::array<double, 3>> total;
      for (int q = 0; q < cfg.world; ++q) {
        const std::string part = cfg.world > 1 ? comm.storeGet("digest/" + std::to_string(q)) : d.dump();
        for (const auto& e : nlohmann::json::parse(part)) {
          auto& t = total[e[0].get<std::string>()];
          for (int i = 0; i < 3; ++i) t[i] += e[i + 1].get<double>();
        }
      }
      store->writeWeightDigest(total);
    }
  }

  if (trace) {
    const tracer::ClockSample clock_end = syncClock(comm, "end");
    ops.reset();
    cupti.reset();  // flushes CUPTI's buffers into the shard
    tracer::Tracer::setCurrent(nullptr);
    trace->setMeta("rank", std::to_string(env.rank));
    trace->close();
    nlohmann::json info = {{"path", trace->path()}, {"host", hostName()}, {"pid", int64_t(getpid())},
                           {"device", dev.device}, {"offset_start", clock_start.offset_ns},
                           {"offset_end", clock_end.offset_ns}};
    std::vector<tracer::ShardInfo> shards;
    if (cfg.world > 1) {
      comm.storeSet("shard/" + std::to_string(env.rank), info.dump());
      comm.world().barrier();
    }
    if (store) {
      for (int q = 0; q < cfg.world; ++q) {
        auto j = nlohmann::json::parse(cfg.world > 1 ? comm.storeGet("shard/" + std::to_string(q)) : info.dump());
        shards.push_back({j["path"], q, j["host"], j["device"], j["pid"], j["offset_start"], j["offset_end"]});
      }
      tracer::mergeShards(store->path(), shards);
    }
    if (cfg.world > 1) comm.world().barrier();  // no rank exits while rank 0 still reads its shard
  }

  const double tokens_per_s = timed ? tok_sum / time_sum : 0.0;
  std::sort(step_times.begin(), step_times.end());
  const double median_step = step_times.empty() ? 0.0 : step_times[step_times.size() / 2];
  if (!cfg.quiet) {
    out << "done: " << cfg.steps << " steps, " << std::fixed << std::setprecision(0) << tokens_per_s
        << " tokens/s; peak memory " << mib(peak) << (cfg.world > 1 ? " (max over ranks)" : "") << "; rank 0: params "
        << mib(last.param_bytes) << ", grads " << mib(last.grad_bytes) << ", optimizer " << mib(last.optim_bytes)
        << ", activations " << mib(last.activation_bytes) << "\n";
    if (store) out << "run database: " << store->path() << "\n";
  }
  if (cfg.json && leader) {
    nlohmann::json j = {{"workload", cfg.model.name}, {"parameters", params}, {"device", dev.device},
                        {"world", cfg.world}, {"dp", cfg.dp}, {"tp", cfg.tp}, {"pp", cfg.pp},
                        {"steps", cfg.steps}, {"first_loss", first_loss}, {"final_loss", last.loss},
                        {"tokens_per_s", tokens_per_s}, {"step_time_s", timed ? time_sum / double(timed) : 0.0},
                        {"step_time_median_s", median_step},
                        {"tokens_per_s_median", median_step > 0 ? double(cfg.tokensPerStep()) / median_step : 0.0},
                        {"peak_bytes", peak}, {"param_bytes", last.param_bytes}, {"grad_bytes", last.grad_bytes},
                        {"optim_bytes", last.optim_bytes}, {"activation_bytes", last.activation_bytes},
                        {"model_flops_per_step", last.model_flops * cfg.world},
                        {"hw_flops_per_step", last.hw_flops * cfg.world},
                        {"model_flops_per_s", timed ? last.model_flops * cfg.world * double(timed) / time_sum : 0.0},
                        {"allreduce_hidden_share", timed ? hidden_sum / double(timed) : 0.0},
                        {"grad_comm_s_per_step", timed ? comm_sum / double(timed) : 0.0},
                        {"skipped_steps", skipped}, {"loss_scale", trainer.lossScale()},
                        {"config", nlohmann::json::parse(toJson(cfg))}};
    // MFU/HFU over the same steps as tokens_per_s (all but the first), per device.
    std::optional<double> peak_tflops = cfg.peak_tflops ? cfg.peak_tflops : dev.peak_tflops;
    if (peak_tflops && timed) {
      j["mfu"] = last.model_flops * double(timed) / time_sum / (*peak_tflops * 1e12);
      j["hfu"] = last.hw_flops * double(timed) / time_sum / (*peak_tflops * 1e12);
      j["peak_tflops"] = *peak_tflops;
    }
    if (store) j["out"] = store->path();
    out << j.dump() << "\n";
  }
  return 0;
}

}  // namespace

int runCommand(TrainConfig cfg, std::ostream& out, std::ostream& err) {
  const RankEnv env = rankEnvFromEnvironment();
  resolve(cfg, env.distributed ? env.world : 1);
  if (cfg.sequence_parallel && cfg.seq % cfg.tp != 0)
    throw UserError("--seq", "sequence parallelism needs seq divisible by tp", "pick --seq a multiple of --tp");
  const Layout layout = Layout::make(cfg.world, env.rank, cfg.tp, cfg.pp);
  const bool leader = env.rank == 0;
  if (!leader) {
    cfg.quiet = true;
  }
  // Ranks on one host share its cores.
  if (cfg.threads > 0) at::set_num_threads(cfg.threads);
  else if (env.local_world > 1)
    at::set_num_threads(std::max(1u, std::thread::hardware_concurrency() / unsigned(env.local_world)));
  DeviceChoice dev = chooseDevice(cfg.device, cfg.precision);
  if (dev.device != "cpu") dev.device = "cuda:" + std::to_string(env.local_rank);
  if (!dev.notice.empty() && leader) err << dev.notice << "\n";

  CommOptions copts;
  copts.device = dev.device;
  copts.rendezvous_timeout = std::chrono::milliseconds(int64_t(cfg.rendezvous_timeout_s * 1000));
  copts.collective_timeout = std::chrono::milliseconds(int64_t(cfg.collective_timeout_s * 1000));
  std::unique_ptr<Comm> comm = Comm::connect(env, layout, copts);
  // A rank's own failure is reported before its process groups close, so that the launcher can tell
  // it from the peers' "connection closed" errors that it causes.
  try {
    return trainOnComm(cfg, env, layout, dev, *comm, out, err);
  } catch (const std::exception& e) {
    reportRankError(e.what());
    throw;
  }
}

}  // namespace trainscope::runtime
