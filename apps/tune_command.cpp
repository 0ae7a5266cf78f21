// tune_command.cpp — see tune_command.h. The study runs in tuner/ (tune.h, search.h); this file
// parses flags, formats progress from the tuner's events (a bar on a terminal, plain lines
// otherwise), and prints the ranked table and the recommendation. `export` is export_command.cpp.
#include "tune_command.h"
#include "local_cluster.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/json_text.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/runconfig/fields.h"
#include "trainscope/tuner/models.h"
#include "trainscope/tuner/export.h"
#include "trainscope/tuner/tune.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::apps {

namespace rt = trainscope::runtime;
namespace tn = trainscope::tuner;

struct TuneFlags {
  std::string workload = "small-cpu", cluster = "cpu-local", study, budget, launcher = "local", mem_limit, inject;
  std::string mbs = "1,2,4,8,16,32", ckpt = "none,selective,full", precision, schedules = "1f1b,gpipe", ranks;
  std::string zero = "0,1,2,3", cp = "1,2,4", virtual_stages = "1,2,4";
  int64_t gbs = 0, seq = 0, max_trials = 0, first_round = 8, steps = 3, nodes = 0;
  int64_t finalists = 3, final_rounds = 2;
  double trial_timeout = 300;
  std::string search = "halving";
  bool resume = false, predict_only = false, explain = false, exhaustive = false, no_zero = false, no_sp = false;
  bool json = false;
};

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int64_t> parseCounts(const std::string& list, const std::string& field, int64_t hi) {
  std::vector<int64_t> out;
  for (const auto& item : split(list))
    out.push_back(rt::parseInteger(item, field, 1, hi, "pass a comma-separated list such as 1,2,4"));
  return out;
}

void requireAtLeast(int64_t v, int64_t lo, const std::string& field, const std::string& fix) {
  if (v < lo) throw UserError(field, std::to_string(v) + " is below " + std::to_string(lo), fix);
}

// Counts that are doubled, summed or turned into clock durations: past `hi` refused naming the flag,
// before any of that can wrap.
void requireAtMost(int64_t v, int64_t hi, const std::string& field, const std::string& fix) {
  if (v > hi) throw UserError(field, std::to_string(v) + " is above " + std::to_string(hi), fix);
}

// The longest wall time a flag may name (10^7 s, 115 days): a duration past it would overflow the clock.
constexpr double kLongestSeconds = 1e7;

// --inject: CANDIDATE:crash|hang|oom[,…].
void checkInject(const std::string& spec) {
  for (const auto& item : split(spec)) {
    const auto colon = item.find(':');
    const std::string what = colon == std::string::npos ? "" : item.substr(colon + 1);
    if (colon == std::string::npos || (what != "crash" && what != "hang" && what != "oom"))
      throw UserError("--inject", "\"" + item + "\" is not CANDIDATE:crash|hang|oom", "e.g. --inject 0:crash,1:hang");
    rt::parseInteger(item.substr(0, colon), "--inject", 0, int64_t(1) << 40,
               "name a candidate by its id, e.g. --inject 0:crash");
  }
}

// A global batch whose memory figures the models cannot count (tn::figuresCountable), refused up
// front naming the flag.
void checkFigures(const workloads::Workload& w, const tn::Cluster& c, int64_t gbs, int64_t seq_flag) {
  const int64_t seq = seq_flag > 0 ? std::min<int64_t>(seq_flag, w.n_positions) : std::min<int64_t>(w.n_positions, 1024);
  if (!tn::figuresCountable(w, (long double)gbs, seq, c.devices()))
    throw UserError("--gbs",
                    std::to_string(gbs) + " sequences of " + std::to_string(seq) + " tokens of " + w.name +
                        " need more memory than the models can count (over 2^60 bytes)",
                    "pass a global batch a cluster could hold");
}

double parseDuration(const std::string& s) {
  if (s.empty()) return 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string unit(end);
  const double scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : -1;
  if (end == s.c_str() || scale < 0 || !(v > 0) || !std::isfinite(v))
    throw UserError("--budget", "\"" + s + "\" is not a duration", "pass e.g. 90s, 20m or 2h");
  if (v * scale > kLongestSeconds)
    throw UserError("--budget", "\"" + s + "\" is longer than 10^7 s (115 days)", "pass e.g. 90s, 20m or 2h");
  return v * scale;
}

// "round 1, final,   dp2 …  ok  98 ms/step, 5224 tok/s": what one trial did.
std::string progressLine(const tn::TuneEvent& e) {
  const tn::TrialRecord& t = e.trial;
  const char* stage = e.stage == tn::SearchStage::Profile ? " profile,"
                      : e.stage == tn::SearchStage::Final ? " final,  "
                                                          : ",        ";
  const std::string outcome = t.status == tn::TrialStatus::Ok
                                  ? std::to_string(int(t.step_s * 1e3 + 0.5)) + " ms/step, " +
                                        std::to_string(int64_t(t.tokens_per_s)) + " tok/s"
                                  : t.message;
  char line[300];
  std::snprintf(line, sizeof(line), "round %lld%s %-44s %-7s %s", static_cast<long long>(t.round), stage,
                e.plan.c_str(), toString(t.status), outcome.c_str());
  return line;
}

std::string mib(int64_t b) {
  char s[32];
  std::snprintf(s, sizeof(s), "%.1f", double(b) / 1048576.0);
  return s;
}

}  // namespace

CLI::App* addTuneCommand(CLI::App& app, TuneFlags*& f) {
  f = new TuneFlags();  // lives as long as the process
  CLI::App* c = app.add_subcommand("tune", "find the fastest configuration that fits: models rank, short trials decide");
  c->add_option("--workload", f->workload)->capture_default_str();
  c->add_option("--cluster", f->cluster, "cluster preset, JSON file, or `local` (measure this machine)")->capture_default_str();
  c->add_option("--nodes", f->nodes, "nodes (default: the cluster file's)");
  c->add_option("--gbs", f->gbs, "global batch in sequences")->required();
  c->add_option("--seq", f->seq, "sequence length (default: the workload's n_positions, at most 1024)");
  c->add_option("--study", f->study, "the study database (SQLite)")->required();
  c->add_flag("--resume", f->resume, "continue the study in --study after an interruption");
  c->add_option("--budget", f->budget, "wall time for the trials (90s, 20m, 2h)");
  c->add_option("--max-trials", f->max_trials, "trial processes in all");
  c->add_option("--first-round", f->first_round, "candidates measured in the first round")->capture_default_str();
  c->add_option("--trial-steps", f->steps, "steps of a first-round trial (doubled each round)")->capture_default_str();
  c->add_option("--finalists", f->finalists, "candidates of the final stage (the halving's best)")->capture_default_str();
  c->add_option("--final-rounds", f->final_rounds, "trials of each finalist, run alternately (0: halve down to one)")
      ->capture_default_str();
  c->add_option("--trial-timeout", f->trial_timeout, "seconds before a trial counts as hung")->capture_default_str();
  c->add_option("--launcher", f->launcher, "local|slurm (trials as job steps of your allocation)")->capture_default_str();
  c->add_option("--mem-limit", f->mem_limit, "memory per rank (overrides the cluster file's; CPU trials run under it)");
  c->add_option("--mbs", f->mbs, "micro-batch sizes to try")->capture_default_str();
  c->add_option("--ckpt", f->ckpt, "checkpointing modes to try")->capture_default_str();
  c->add_option("--precision", f->precision, "precisions to try (default: fp32 on CPU, bf16 on GPU)");
  c->add_option("--pp-schedules", f->schedules, "pipeline schedules to try")->capture_default_str();
  c->add_option("--ranks", f->ranks, "CPU clusters: world sizes to try (default: each divisor of the ranks)");
  c->add_option("--zero", f->zero, "ZeRO stages to try (with DP; those the runtime refuses are listed as such)")
      ->capture_default_str();
  c->add_option("--cp", f->cp, "context-parallel degrees to try (dividing the world; seq a multiple of 2 x cp)")
      ->capture_default_str();
  c->add_option("--virtual-stages", f->virtual_stages,
                "interleaved 1F1B: model chunks per pipeline rank to try (with PP; 1: plain 1F1B/GPipe)")
      ->capture_default_str();
  c->add_flag("--no-zero", f->no_zero, "leave ZeRO out of the space (the same as --zero 0)");
  c->add_flag("--no-sequence-parallel", f->no_sp, "leave sequence parallelism out of the space");
  c->add_flag("--predict-only", f->predict_only, "rank the whole space from the models alone");
  c->add_option("--search", f->search,
                "halving: successive halving with a final stage; exhaustive: measure every valid candidate "
                "(ground truth for benchmarks)")
      ->capture_default_str();
  c->add_flag("--exhaustive", f->exhaustive, "the same as --search exhaustive");
  c->add_flag("--explain", f->explain, "list every rejected combination with its reason");
  c->add_flag("--json", f->json, "one JSON object at the end");
  c->add_option("--inject", f->inject, "testing: CANDIDATE:crash|hang|oom[,…]");
  return c;
}

// Every flag is checked before anything is created or run (bad input exits 2 naming the flag); the
// space the flags describe.
tn::SpaceOptions checkedSpace(const TuneFlags& f) {
  if (f.study.find_first_not_of(" \t\n\r\f\v") == std::string::npos)
    throw UserError("--study", "is empty", "name the study's file, e.g. --study study.db");
  requireAtLeast(f.gbs, 1, "--gbs", "pass the global batch in sequences");
  requireAtLeast(f.seq, 0, "--seq", "pass a sequence length, or leave it out for the workload's");
  requireAtLeast(f.nodes, 0, "--nodes", "pass a number of nodes, or leave it out for the cluster file's");
  requireAtLeast(f.max_trials, 0, "--max-trials", "pass a number of trial processes, or leave it out for no cap");
  requireAtLeast(f.first_round, 1, "--first-round", "pass 1 or more (default 8)");
  requireAtLeast(f.steps, 1, "--trial-steps", "pass 1 or more (default 3)");
  if (f.finalists < 2) throw UserError("--finalists", "must be at least 2", "pass 2 or more (default 3)");
  if (f.final_rounds < 0) throw UserError("--final-rounds", "must not be negative", "pass 0 for plain halving, or 2");
  if (!(f.trial_timeout > 0) || !std::isfinite(f.trial_timeout) || f.trial_timeout > kLongestSeconds)
    throw UserError("--trial-timeout", "must be a positive number of seconds, at most 10^7", "pass e.g. 300");
  constexpr int64_t kMost = int64_t(1) << 20;
  requireAtMost(f.nodes, tn::kMostClusterDevices, "--nodes", "pass a number of nodes, or leave it out for the cluster file's");
  requireAtMost(f.max_trials, kMost, "--max-trials", "pass a number of trial processes, or leave it out for no cap");
  requireAtMost(f.first_round, kMost, "--first-round", "pass a smaller first round (default 8)");
  requireAtMost(f.steps, kMost, "--trial-steps", "pass a few steps (default 3; each round doubles them)");
  requireAtMost(f.finalists, kMost, "--finalists", "pass a few finalists (default 3)");
  requireAtMost(f.final_rounds, kMost, "--final-rounds", "pass a few rounds (default 2)");
  rt::parseLauncher(f.launcher);  // refused before anything is made (TuneOptions takes it parsed)
  checkInject(f.inject);
  if (f.search != "halving" && f.search != "exhaustive")
    throw UserError("--search", "unknown value \"" + f.search + "\"", std::string("use one of ") + tn::searchNames());
  tn::SpaceOptions so;
  so.gbs = f.gbs;
  so.seq = f.seq;
  so.mbs = parseCounts(f.mbs, "--mbs", int64_t(1) << 30);
  if (so.mbs.empty()) throw UserError("--mbs", "lists no micro-batch size", "pass e.g. --mbs 1,2,4");
  so.ckpt.clear();
  for (const auto& m : split(f.ckpt)) so.ckpt.push_back(rt::parseCheckpointing(m, "--ckpt"));
  if (so.ckpt.empty()) throw UserError("--ckpt", "lists no checkpointing mode", "pass e.g. --ckpt none,selective,full");
  for (const auto& m : split(f.precision)) so.precisions.push_back(rt::parsePrecision(m, "--precision"));
  so.schedules.clear();
  // The schedules by their one name (runconfig's parseScheduleInto, as run and predict read them):
  // "interleaved" is the 1F1B schedule with more than one model chunk per stage.
  bool plain_1f1b = false, interleaved = false;
  for (const auto& m : split(f.schedules)) {
    rt::Parallelism named;
    rt::parseScheduleInto(m, "--pp-schedules", named);
    const rt::PipelineSchedule s = named.pp_schedule;
    (named.interleaved() ? interleaved : plain_1f1b) |= s == rt::PipelineSchedule::OneFOneB;
    if (std::find(so.schedules.begin(), so.schedules.end(), s) == so.schedules.end()) so.schedules.push_back(s);
  }
  if (so.schedules.empty())
    throw UserError("--pp-schedules", "lists no schedule", "pass e.g. --pp-schedules 1f1b,gpipe");
  so.plain_one_f_one_b = plain_1f1b || !interleaved;
  so.worlds = parseCounts(f.ranks, "--ranks", int64_t(1) << 20);
  so.zero.clear();
  for (const auto& z : split(f.zero))
    so.zero.push_back(rt::zeroStage(rt::parseInteger(z, "--zero", 0, 3, "pass stages from 0 to 3, e.g. --zero 0,1"), "--zero"));
  if (so.zero.empty()) throw UserError("--zero", "lists no ZeRO stage", "pass e.g. --zero 0,1,2,3");
  if (f.no_zero) so.zero = {rt::ZeroStage::None};
  so.cp = parseCounts(f.cp, "--cp", int64_t(1) << 20);
  if (so.cp.empty()) throw UserError("--cp", "lists no degree", "pass e.g. --cp 1,2");
  so.virtual_stages = parseCounts(f.virtual_stages, "--virtual-stages", int64_t(1) << 20);
  if (so.virtual_stages.empty()) throw UserError("--virtual-stages", "lists no count", "pass e.g. --virtual-stages 1,2");
  if (interleaved && std::none_of(so.virtual_stages.begin(), so.virtual_stages.end(), [](int64_t v) { return v > 1; }))
    throw UserError("--pp-schedules", "interleaved needs model chunks per stage above 1, and --virtual-stages lists none",
                    "pass e.g. --virtual-stages 2,4 with it");
  if (f.no_sp) so.sequence_parallel = {false};
  return so;
}

// Per candidate measured: its ok trials pooled into its step time (r.estimate), and the highest peak.
std::map<int64_t, std::pair<int64_t, int64_t>> okTrials(const tn::TuneResult& r) {
  std::map<int64_t, std::pair<int64_t, int64_t>> ok;  // candidate → (pooled trials, max peak bytes)
  for (const auto& t : r.trials)
    if (t.status == tn::TrialStatus::Ok) {
      auto& [n, peak] = ok[t.candidate];
      if (n == 0) tn::pooledStepTime(r.trials, t.candidate, &n);
      peak = std::max(peak, t.peak_bytes);
    }
  return ok;
}

// --json: the whole study's outcome as one object.
nlohmann::json resultJson(const TuneFlags& f, const workloads::Workload& w, const tn::Cluster& c, const tn::TuneResult& r,
                          int64_t valid) {
  nlohmann::json j = {{"study", f.study}, {"workload", w.name}, {"cluster", c.name}, {"candidates", r.candidates.size()},
                      {"valid", valid}, {"trials_run", r.trials_run}, {"time_scale", r.time_scale},
                      {"recommended", r.recommended}, {"interrupted", r.interrupted}};
  if (r.recommended >= 0 && r.estimate.count(r.recommended)) j["recommended_step_s"] = r.estimate.at(r.recommended);
  for (const auto& t : r.trials)
    j["trials"].push_back({{"candidate", t.candidate}, {"round", t.round}, {"steps", t.steps},
                           {"status", toString(t.status)}, {"step_s", t.step_s}, {"tokens_per_s", t.tokens_per_s},
                           {"peak_bytes", t.peak_bytes}, {"predicted_step_s", t.predicted_step_s},
                           {"predicted_peak", t.predicted_peak}, {"db", t.db_path},
                           {"profile", t.round == 0 && std::count(r.profiles.begin(), r.profiles.end(), t.candidate) > 0}});
  for (const auto& cand : r.candidates)
    j["ranked"].push_back({{"id", cand.id}, {"plan", cand.plan.describe()}, {"rejected", cand.rejected},
                           {"zero", rt::stageNumber(cand.plan.zero)}, {"virtual_stages", cand.plan.virtual_stages},
                           {"cp", cand.plan.cp}, {"ep", cand.plan.ep},
                           {"predicted_step_s", cand.predicted_step_s}, {"predicted_peak", cand.predicted_peak},
                           {"time_measured", cand.time_measured},
                           {"measured_step_s", r.estimate.count(cand.id) && r.estimate.at(cand.id) > 0
                                                   ? nlohmann::json(r.estimate.at(cand.id))
                                                   : nlohmann::json()},
                           {"predicted_step_s_analytic", cand.rejected.empty() ? tn::predictTime(w, cand.plan, c).step_s : 0.0}});
  j["measured_costs"] = nlohmann::json::parse(tn::costsJson(r.costs));
  if (!r.trials.empty()) j["prediction_check"] = nlohmann::json::parse(tn::toJson(r.prediction_check));
  if (r.network_fit.samples > 0)
    j["network_fit"] = {{"latency_s", r.network_fit.tier.latency},
                        {"bandwidth_bytes_per_s", r.network_fit.tier.bandwidth},
                        {"samples", r.network_fit.samples}, {"r2", r.network_fit.r2}};
  return j;
}

// The ranked candidates with what was measured of each, and the layer costs the predictions came from.
void printTable(const TuneFlags& f, const workloads::Workload& w, const tn::Cluster& c, const tn::TuneResult& r,
                int64_t valid, std::map<int64_t, std::pair<int64_t, int64_t>>& ok_trials) {
  std::printf("\n%s on %s, gbs %lld: %zu combinations, %lld valid and predicted to fit", w.name.c_str(), c.name.c_str(),
              static_cast<long long>(f.gbs), r.candidates.size(), static_cast<long long>(valid));
  std::printf(" (memory limit %s MiB per rank)\n", mib(c.memory_bytes).c_str());
  std::printf("\n  id  zero  v cp ep  %-46s %11s %10s %6s %10s %10s %10s\n", "configuration", "pred ms", "meas ms",
              "trials", "tokens/s", "pred MiB", "meas MiB");
  int shown = 0;
  for (const auto& cand : r.candidates) {
    if (!cand.rejected.empty()) continue;
    const bool ran = ok_trials.count(cand.id) > 0;
    if (++shown > 20 && !ran) continue;
    const double step = ran && r.estimate.count(cand.id) ? r.estimate.at(cand.id) : 0;
    std::string failed;
    for (const auto& tr : r.trials)
      if (tr.candidate == cand.id && tr.status != tn::TrialStatus::Ok) failed = toString(tr.status);
    std::printf("%s%3lld  %4d %2lld %2lld %2lld  %-46s %10.1f%s %10s %6s %10s %10s %10s%s\n", cand.id == r.recommended ? "*" : " ",
                static_cast<long long>(cand.id), rt::stageNumber(cand.plan.zero),
                static_cast<long long>(cand.plan.virtual_stages), static_cast<long long>(cand.plan.cp),
                static_cast<long long>(cand.plan.ep), cand.plan.describe().c_str(), cand.predicted_step_s * 1e3,
                cand.time_measured ? "m" : " ", step > 0 ? std::to_string(int(step * 1e3 + 0.5)).c_str() : "-",
                ran ? std::to_string(ok_trials[cand.id].first).c_str() : "-",
                step > 0 ? std::to_string(int64_t(double(cand.plan.gbs * cand.plan.seq) / step + 0.5)).c_str() : "-",
                mib(cand.predicted_peak).c_str(), ran ? mib(ok_trials[cand.id].second).c_str() : "-",
                failed.empty() ? "" : ("  " + failed).c_str());
  }
  std::printf("(meas ms: each trial's median step, pooled over the candidate's ok trials by their counted steps; "
              "meas MiB: the highest peak of any)\n");
  std::printf("(pred ms: m = composed from the layer costs measured in this study's traced trials (%zu layer "
              "shapes); else the analytic model scaled to them)\n", r.costs.runs().size());
  if (r.network_fit.samples > 0)
    std::printf("(network refitted from %lld DP/TP collectives of the trials: latency %.1f us, %.2f GB/s, R^2 %.2f)\n",
                static_cast<long long>(r.network_fit.samples), r.network_fit.tier.latency * 1e6,
                r.network_fit.tier.bandwidth / 1e9, r.network_fit.r2);
  if (!r.costs.empty()) {
    // Why the composed predictions are what they are: the costs each layer shape measured.
    std::printf("\n  %-48s %5s %9s %9s %9s %9s %9s %7s\n", "layer shape (per micro-batch; DP sync per step)", "runs",
                "layer fwd", "layer bwd", "recompute", "LM head", "DP sync", "hidden");
    for (const auto& [key, runs] : r.costs.runs())
      for (int64_t z : r.costs.zeroStages(key)) {
        const tn::LayerCosts k = *r.costs.find(key, z);
        auto ms = [](double s) {
          char b[32];
          std::snprintf(b, sizeof(b), "%.1f ms", s * 1e3);
          return s > 0 ? std::string(b) : std::string("-");
        };
        const double rc = k.recompute_full_s > 0 ? k.recompute_full_s : k.recompute_selective_s;
        std::printf("  %-48s %5lld %9s %9s %9s %9s %9s %7s\n", tn::costsLabel(key, k).c_str(), static_cast<long long>(k.runs),
                    ms(k.layer_fwd_s).c_str(), ms(k.layer_bwd_s).c_str(), ms(rc).c_str(), ms(k.head_s).c_str(),
                    ms(k.dp_sync_s).c_str(),
                    k.dp_hidden_share >= 0 ? (std::to_string(int(k.dp_hidden_share * 100 + 0.5)) + "%").c_str() : "-");
      }
  }
}

// One progress line: on a terminal a bar with the best so far beneath it, else a plain line.
void printProgress(const tn::TuneEvent& e, bool tty) {
  char head[160];
  std::snprintf(head, sizeof(head), "[%lld/%lld] %5.0fs eta %4.0fs", static_cast<long long>(e.done),
                static_cast<long long>(e.planned), e.elapsed_s, e.eta_s);
  const std::string line = progressLine(e);
  if (tty) {
    const int width = 20, filled = e.planned ? int(width * e.done / std::max<int64_t>(1, e.planned)) : 0;
    std::cout << "\r\033[K" << std::string(size_t(std::min(filled, width)), '#')
              << std::string(size_t(width - std::min(filled, width)), '.') << " " << head << "  " << line << "\n"
              << "best so far: " << (e.best_plan.empty() ? "-" : e.best_plan) << std::flush;
    std::cout << "\r";
  } else {
    std::cout << head << "  " << line << "  | best: " << (e.best_plan.empty() ? "-" : e.best_plan) << std::endl;
  }
}

namespace {

// The files a tune reads (--workload's and --cluster's, when they are files): never its outputs.
std::vector<std::string> tuneInputs(const TuneFlags& f) {
  std::vector<std::string> in;
  struct stat st {};
  for (const std::string& p : {f.workload, f.cluster})
    if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) in.push_back(p);
  return in;
}

// The cluster the study runs on: --cluster's file, or with `local` this machine measured into files
// beside the study; --mem-limit overrides its memory per rank.
tn::Cluster tuneCluster(const TuneFlags& f, const std::string& self_dir, int64_t mem_limit) {
  const std::string cluster_file =
      f.cluster == "local" ? measureLocalCluster(f.study, self_dir, mem_limit, f.resume) : f.cluster;
  tn::Cluster c = tn::loadCluster(cluster_file, f.nodes);
  if (mem_limit > 0) c.memory_bytes = mem_limit;
  return c;
}

// The tuner's options from the flags (already checked), on cluster `c`.
tn::TuneOptions tuneOptions(const TuneFlags& f, const tn::Cluster& c, const tn::StudyLock* lock,
                            const std::string& self_dir, double budget_s) {
  tn::TuneOptions o;
  o.study_path = f.study;
  o.resume = f.resume;
  o.lock = lock;
  o.predict_only = f.predict_only;
  o.search = f.exhaustive ? "exhaustive" : f.search;  // --exhaustive: an alias
  o.max_trials = f.max_trials;
  o.budget_s = budget_s;
  o.first_round = f.first_round;
  o.base_steps = std::max<int64_t>(2, f.steps);
  o.finalists = f.finalists;
  o.final_rounds = f.final_rounds;
  o.trial_timeout_s = f.trial_timeout;
  o.launcher = rt::parseLauncher(f.launcher);
  o.trainscope = self_dir + "/trainscope";
  o.work_dir = f.study + ".trials";
  o.mem_limit = c.kind == tn::ClusterKind::Cpu ? c.memory_bytes : 0;
  o.inject = f.inject;
  return o;
}

// The study, with a progress line per trial.
tn::TuneResult runStudy(const workloads::Workload& w, const tn::Cluster& c, const tn::SpaceOptions& so,
                        const tn::TuneOptions& o) {
  const bool tty = isatty(1);
  auto progress = [tty](const tn::TuneEvent& e) { printProgress(e, tty); };
  tn::TuneResult r = tn::tune(w, c, so, o, progress);
  if (tty) std::cout << "\n";
  return r;
}

// Nothing to rank or run: the flags asked for an empty space. Say why, with an example.
[[noreturn]] void refuseEmptySpace(const TuneFlags& f, const tn::TuneResult& r) {
  int64_t over_memory = 0;
  for (const auto& cand : r.candidates) over_memory += cand.rejected.rfind("predicted memory", 0) == 0;
  if (f.explain) {
    std::printf("rejected:\n");
    for (const auto& cand : r.candidates)
      std::printf("  %-46s %s\n", cand.plan.describe().c_str(), cand.rejected.c_str());
  }
  std::string example;
  for (const auto& cand : r.candidates)
    if (example.empty() || cand.rejected.rfind("predicted memory", 0) == 0)
      example = cand.plan.describe() + ": " + cand.rejected;
  throw UserError(r.candidates.empty()                          ? "--ranks"
                  : over_memory == int64_t(r.candidates.size()) ? "--mem-limit"
                                                                : "--gbs",
                  "none of the " + std::to_string(r.candidates.size()) +
                      " combinations is valid and predicted to fit" +
                      (example.empty() ? std::string() : " (e.g. " + example + ")"),
                  "see them with --predict-only --explain; change --gbs, --mbs, --ranks, --mem-limit or --cluster");
}

// --explain: every rejected combination with its reason.
void printRejected(const tn::TuneResult& r) {
  std::printf("\nrejected:\n");
  for (const auto& cand : r.candidates)
    if (!cand.rejected.empty()) std::printf("  %-46s %s\n", cand.plan.describe().c_str(), cand.rejected.c_str());
}

// How well the models ranked what the trials then measured (prediction_check.h).
void printPredictionCheck(const tn::PredictionCheck& pc) {
  if (pc.candidates == 0) return;
  std::printf("the models against the trials: ");
  if (std::isfinite(pc.spearman))
    std::printf("rank correlation %.2f over %lld measured candidates, ", pc.spearman,
                static_cast<long long>(pc.candidates));
  else
    std::printf("%lld measured candidate(s), too few to rank, ", static_cast<long long>(pc.candidates));
  std::printf("mean |error| %.0f%% (each candidate's prediction before its first trial)\n", pc.mean_abs_error * 100);
}

// The recommended candidate: its pooled step time, peak and trace, and how to export it.
void printRecommendation(const TuneFlags& f, const tn::TuneResult& r,
                         std::map<int64_t, std::pair<int64_t, int64_t>>& ok_trials) {
  const tn::TrialRecord* best = nullptr;  // its latest (longest) ok trial: the trace to open
  for (const auto& t : r.trials)
    if (t.candidate == r.recommended && t.status == tn::TrialStatus::Ok && (!best || t.round >= best->round)) best = &t;
  const int64_t runs = ok_trials[r.recommended].first;
  const double est = r.estimate.count(r.recommended) ? r.estimate.at(r.recommended) : best->step_s;
  const auto& rp = r.candidates[size_t(r.recommended)].plan;
  std::printf("\nrecommended: %s — %.1f ms/step over its %lld trials (%.0f tokens/s), peak %s MiB per rank "
              "(candidate %lld)\n",
              rp.describe().c_str(), est * 1e3, static_cast<long long>(runs), double(rp.gbs * rp.seq) / est,
              mib(ok_trials[r.recommended].second).c_str(), static_cast<long long>(r.recommended));
  // Paths in a command line are quoted: a study may be named anything, and these lines get pasted.
  std::printf("its trace: %s   exports: trainscope export %s --format %s\n", best->db_path.c_str(),
              files::shellQuote(f.study).c_str(), tn::exportFormatNames());
  printPredictionCheck(r.prediction_check);
}

// How the study ended — interrupted, nothing measured to run (or ranked only), or a recommendation —
// and the exit status that goes with it.
int printConclusion(const TuneFlags& f, const tn::TuneOptions& o, const tn::TuneResult& r, int64_t valid,
                    std::map<int64_t, std::pair<int64_t, int64_t>>& ok_trials) {
  if (r.interrupted) {
    std::printf("\ninterrupted: %lld trial(s) ran; continue with --resume\n", static_cast<long long>(r.trials_run));
    return 128 + r.signal;  // 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP, as a shell reports a process they killed
  }
  if (r.recommended < 0) {
    if (o.predict_only && valid > 0)
      std::printf("\npredicted fastest: %s\n", r.candidates[0].plan.describe().c_str());
    else
      std::printf("\nno configuration was measured to run: see the trials' logs in %s\n", o.work_dir.c_str());
    return o.predict_only && valid > 0 ? 0 : 1;
  }
  printRecommendation(f, r, ok_trials);
  return 0;
}

}  // namespace

int runTune(const TuneFlags& f, const std::string& self_dir) {
  const tn::SpaceOptions so = checkedSpace(f);
  const double budget_s = parseDuration(f.budget);
  const int64_t mem_limit = f.mem_limit.empty() ? 0 : rt::parseBytes(f.mem_limit, "--mem-limit");
  const workloads::Workload w = workloads::load(f.workload);

  // One tuner per study, from here to the end (study.h): taken before --cluster local measures into
  // files beside the study. --predict-only makes no study.
  std::unique_ptr<tn::StudyLock> lock;
  if (!f.predict_only) lock = std::make_unique<tn::StudyLock>(f.study, f.resume, tuneInputs(f));
  else tn::checkStudyPath(f.study, f.resume);  // the same refusals: --predict-only writes nothing there
  const tn::Cluster c = tuneCluster(f, self_dir, mem_limit);
  checkFigures(w, c, f.gbs, f.seq);
  const tn::TuneOptions o = tuneOptions(f, c, lock.get(), self_dir, budget_s);

  const tn::TuneResult r = runStudy(w, c, so, o);
  int64_t valid = 0;
  for (const auto& cand : r.candidates) valid += cand.rejected.empty();
  if (valid == 0) refuseEmptySpace(f, r);
  auto ok_trials = okTrials(r);
  if (f.json) {
    std::cout << jsonText(resultJson(f, w, c, r, valid)) << std::endl;
    return r.interrupted ? 128 + r.signal : 0;
  }
  printTable(f, w, c, r, valid, ok_trials);
  if (f.explain) printRejected(r);
  return printConclusion(f, o, r, valid, ok_trials);
}

}  // namespace trainscope::apps
