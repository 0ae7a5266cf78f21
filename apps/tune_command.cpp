// tune_command.cpp — see tune_command.h. The study runs in tuner/ (tune.h, search.h), its inputs are
// checked and parsed there (tune_inputs.h) and its --json made there (tune_json.h); this file binds
// the flags, formats progress from the tuner's events (a bar on a terminal, plain lines otherwise),
// and prints the ranked table and the recommendation. `export` is export_command.cpp.
#include "tune_command.h"
#include "local_cluster.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>

#include "trainscope/common/error.h"
#include "trainscope/models/fit_params.h"
#include "trainscope/common/files.h"
#include "trainscope/common/slurm_ping.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/tuner/models.h"
#include "trainscope/tuner/export.h"
#include "trainscope/tuner/job.h"
#include "trainscope/tuner/tune.h"
#include "trainscope/tuner/tune_inputs.h"
#include "trainscope/tuner/tune_json.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::apps {

namespace rt = trainscope::runconfig;
namespace tn = trainscope::tuner;

// The flags: the study's inputs (tuner/tune_inputs.h) and how to show its outcome.
struct TuneFlags : tn::TuneInputs {
  bool explain = false, json = false;
};

namespace {

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
  c->add_option("--workload", f->workload,
                "workload name, JSON path, or Hugging Face config.json or its folder (as run's)")
      ->capture_default_str();
  c->add_option("--cluster", f->cluster, "cluster preset, JSON file, or `local` (measure this machine)")->capture_default_str();
  c->add_option("--nodes", f->nodes, "nodes (default: the cluster file's)");
  c->add_option("--gbs", f->gbs, "global batch in sequences")->required();
  c->add_option("--seq", f->seq, "sequence length (default: the workload's n_positions, at most 1024)");
  c->add_option("--study", f->study, "the study database (SQLite)")->required();
  c->add_flag("--resume", f->resume, "continue the study in --study after an interruption");
  c->add_option("--budget", f->budget, "wall time for the trials (90s, 20m, 2h)");
  c->add_option("--max-trials", f->max_trials, "trial processes in all (0: none, the study holds the ranked space; default: no cap)");
  c->add_option("--first-round", f->first_round, "candidates measured in the first round")->capture_default_str();
  c->add_option("--trial-steps", f->steps,
                "steps of a first-round trial (doubled each round; at least 2 run: step 0 is warm-up)")
      ->capture_default_str();
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
  c->add_option("--inject", f->inject, "testing: CANDIDATE:crash|hang|oom|badpath[,…]");
  c->add_option("--runner", f->runner,
                "what a trial runs: trainscope (its own runtime) or your --entry under hf (torchrun + Trainer), "
                "accelerate, deepspeed, megatron, torchtitan (docs/tuner.md)")
      ->capture_default_str();
  c->add_option("--entry", f->entry, "with --runner: the training script and its arguments, e.g. 'train.py --lr 1e-3'");
  c->add_option("--python", f->python, "with --runner: the interpreter that launches it (default $TRAINSCOPE_PYTHON or python3)");
  c->add_option("--probe", f->probe, "with --runner: the folder holding trainscope_probe (default: found through --python)");
  return c;
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
  if (!r.fitted_constants.empty()) {
    std::string fitted;
    for (const auto& [path, value] : r.fitted_constants) {
      char b[96];
      std::snprintf(b, sizeof(b), "%s%s %.4g", fitted.empty() ? "" : ", ", path.c_str(), value);
      fitted += b;
      // At a bound, as calibrate notes it: the trials ask for more than that constant may give.
      const tn::FitParam& p = tn::fitParam(path, "tune");
      const auto [lo, hi] = tn::boundsOf(p, c);
      const double tol = 1e-6 * std::max(std::abs(lo), std::abs(hi));
      if (std::abs(value - lo) <= tol || std::abs(value - hi) <= tol)
        fitted += std::string(" (at its ") + (std::abs(value - lo) <= tol ? "lower" : "upper") + " bound)";
    }
    std::printf("(cluster constants refitted to the trials' step times before the candidates not measured were "
                "ranked, as `trainscope calibrate` fits: %s; %s)\n", fitted.c_str(),
                tn::refitCrossValidationText(r.refit_cv).c_str());
  }
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
// A ranked-only pick whose predicted peak is over the limit, inside the margin the models are given
// (space.h: memory_margin), was recommended with no word: nothing measured it.
void noteOverTheLimit(const tn::TuneResult& r, int64_t limit) {
  const tn::Candidate& top = r.candidates[0];
  if (top.predicted_peak <= limit) return;
  std::printf("  note: its predicted peak, %s MiB per rank, is over the %s MiB limit, inside the models' margin: no "
              "trial has shown it fits",
              mib(top.predicted_peak).c_str(), mib(limit).c_str());
  for (const tn::Candidate& cand : r.candidates)
    if (cand.rejected.empty() && cand.predicted_peak <= limit) {
      std::printf("; the fastest predicted within the limit is %s (candidate %lld, %s MiB)", cand.plan.describe().c_str(),
                  static_cast<long long>(cand.id), mib(cand.predicted_peak).c_str());
      break;
    }
  std::printf("\n");
}

int printConclusion(const TuneFlags& f, const tn::TuneOptions& o, const tn::TuneResult& r, int64_t valid,
                    std::map<int64_t, std::pair<int64_t, int64_t>>& ok_trials, int64_t limit) {
  if (r.interrupted) {
    std::printf("\ninterrupted: %lld trial(s) ran; continue with --resume\n", static_cast<long long>(r.trials_run));
    return 128 + r.signal;  // 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP, as a shell reports a process they killed
  }
  if (r.recommended < 0) {
    // --predict-only, or --max-trials 0 (a study of the ranked space, no trial): the models' pick.
    const bool ranked_only = (o.predict_only || o.max_trials == 0) && valid > 0;
    // The study of --max-trials 0 holds no recommendation (nothing was measured): its pick is exported
    // by its id.
    const std::string export_hint = o.predict_only || !ranked_only
                                        ? ""
                                        : "; export it with trainscope export " + files::shellQuote(o.study_path) +
                                              " --format FORMAT --trial " + std::to_string(r.candidates[0].id);
    if (ranked_only) {
      std::printf("\npredicted fastest: %s%s\n", r.candidates[0].plan.describe().c_str(),
                  o.predict_only ? "" : (" (--max-trials 0: no trial ran" + export_hint + ")").c_str());
      noteOverTheLimit(r, limit);
    } else
      std::printf("\nno configuration was measured to run: see the trials' logs in %s\n", o.work_dir.c_str());
    return ranked_only ? 0 : 1;
  }
  printRecommendation(f, r, ok_trials);
  return 0;
}

}  // namespace

int runTune(const TuneFlags& f, const std::string& self_dir) {
  const tn::SpaceOptions so = tn::checkedSpace(f);
  const double budget_s = tn::parseDuration(f.budget);
  const int64_t mem_limit = f.mem_limit.empty() ? 0 : rt::parseBytes(f.mem_limit, "--mem-limit");
  const workloads::Workload w = workloads::load(f.workload);
  // --launcher slurm: every trial is an srun, which fails with exit status 1 when no controller
  // answers, why only in each trial's log. Asked once, before the study or any trial is made.
  if (f.launcher == "slurm" && !f.predict_only && f.max_trials != 0) slurm::requireController();

  // One tuner per study, from here to the end (study.h): taken before --cluster local measures into
  // files beside the study. --predict-only makes no study.
  std::unique_ptr<tn::StudyLock> lock;
  if (!f.predict_only) lock = std::make_unique<tn::StudyLock>(f.study, f.resume, tuneInputs(f));
  else tn::checkStudyPath(f.study, f.resume);  // the same refusals: --predict-only writes nothing there
  const tn::Cluster c = tuneCluster(f, self_dir, mem_limit);
  tn::checkFigures(w, c, f.gbs, f.seq);
  tn::TuneOptions o = tn::tuneOptions(f, c, lock.get(), self_dir + "/trainscope", budget_s);
  std::unique_ptr<tn::JobTrialRunner> job;  // --runner hf|…: the user's job runs each trial (job.h)
  if (!o.runner_name.empty() && !f.predict_only) {
    job = std::make_unique<tn::JobTrialRunner>(tn::jobOptions(f, c, w));
    o.runner = job.get();
  }

  const tn::TuneResult r = runStudy(w, c, so, o);
  for (const std::string& n : r.notes) std::fprintf(stderr, "note: %s\n", n.c_str());  // stderr: --json stays one line
  int64_t valid = 0;
  for (const auto& cand : r.candidates) valid += cand.rejected.empty();
  if (valid == 0) refuseEmptySpace(f, r);
  auto ok_trials = okTrials(r);
  if (f.json) {
    std::cout << tn::tuneResultJson(f.study, w, c, r) << std::endl;
    return r.interrupted ? 128 + r.signal : 0;
  }
  printTable(f, w, c, r, valid, ok_trials);
  if (f.explain) printRejected(r);
  return printConclusion(f, o, r, valid, ok_trials, c.memory_bytes);
}

}  // namespace trainscope::apps
