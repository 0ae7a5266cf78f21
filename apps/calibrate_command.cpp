// calibrate_command.cpp — see calibrate_command.h. The rows are read by calibrate_rows.cpp (JSON lines,
// run databases, studies); here the constants are chosen and fitted, cross-validated by model and
// cluster size, and the calibrated cluster file is written with its record.
#include "calibrate_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "calibrate_parts.h"
#include "predict_command.h"
#include "predict_flags.h"
#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/json_text.h"
#include "trainscope/models/fit_params.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/summary.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/tuner/fit.h"
#include "trainscope/tuner/study.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::apps {

namespace rt = trainscope::runconfig;
namespace tn = trainscope::tuner;

namespace {

// "1-8, 10, 12-13" of sorted whole numbers.
std::string rangesText(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(v[i]) + (j > i ? "-" + std::to_string(v[j]) : "");
    i = j + 1;
  }
  return out;
}

// The rows the calibrated file misses most (held out where cross-validated, else in sample), at most
// 10, each named by where it came from: the rows to look at first. The file keeps these, not every
// row's residual (1,549 rows would make each predict parse 0.5 MB).
nlohmann::json largestErrors(const std::vector<tn::FitRow>& rows, const std::vector<double>& base_s,
                             const std::vector<double>& fitted_s, const std::vector<double>& held_s) {
  const std::vector<double>& judged = held_s.empty() ? fitted_s : held_s;
  std::vector<size_t> order(rows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const auto err = [&](size_t i) { return std::fabs(judged[i] / rows[i].measured_s - 1); };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return err(a) > err(b); });
  nlohmann::json out = nlohmann::json::array();
  for (size_t k = 0; k < order.size() && k < 10; ++k) {
    const size_t i = order[k];
    nlohmann::json row = {{"row", rows[i].source}, {"group", rows[i].group}, {"measured_s", rows[i].measured_s},
                          {"base_s", base_s[i]}, {"fitted_s", fitted_s[i]}};
    if (!held_s.empty()) row["held_out_s"] = held_s[i];
    row["error"] = judged[i] / rows[i].measured_s - 1;
    out.push_back(row);
  }
  return out;
}

// The constants to fit: --fit's, or the defaults for the cluster's kind that the rows move.
std::vector<const tn::FitParam*> chosenParams(const CalibrateFlags& f, const tn::Cluster& base, const CalibrationRows& rows) {
  std::vector<const tn::FitParam*> out;
  for (const std::string& path : f.fit) {
    const tn::FitParam& p = tn::fitParam(path, "--fit");
    if (std::find(out.begin(), out.end(), &p) == out.end()) out.push_back(&p);
  }
  if (!out.empty()) {
    for (const tn::FitParam* p : out)
      if (tn::identifiable(base, rows.rows, {p}).empty())
        std::fprintf(stderr, "note: --fit %s: no row's prediction moves with it; it keeps the value that fits best by "
                             "chance\n", p->path.c_str());
    return out;
  }
  std::vector<const tn::FitParam*> defaults;
  for (const tn::FitParam& p : tn::fitParams())
    if ((p.kind.empty() || p.kind == trainscope::models::toString(base.kind)) && p.by_default) defaults.push_back(&p);
  out = tn::identifiable(base, rows.rows, defaults);
  if (out.empty())
    throw UserError("--fit", "no constant of " + base.name + " moves these rows' predictions", "name the constants with --fit");
  return out;
}

}  // namespace


nlohmann::json summaryJson(const tn::ErrorSummary& s) { return nlohmann::json::parse(tn::errorSummaryJson(s)); }

std::string utcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void printSummary(const char* what, const tn::ErrorSummary& s) {
  // No group of 3 rows or more: no rank to correlate ("0.00 (0 groups)" read as a ranking that failed).
  char rho[64] = "n/a (no group of 3 rows or more)";
  if (s.spearman_groups > 0)
    std::snprintf(rho, sizeof(rho), "%.2f (%lld groups)", s.spearman_median, static_cast<long long>(s.spearman_groups));
  std::printf("%-22s MAPE %5.1f%%  median signed %+6.1f%%  p90 |error| %5.1f%%  within-group Spearman %s\n", what,
              s.mape * 100, s.median_signed * 100, s.abs_p90 * 100, rho);
}

CLI::App* addCalibrateCommand(CLI::App& app, CalibrateFlags*& f) {
  f = new CalibrateFlags();  // lives as long as the process
  CLI::App* c = app.add_subcommand("calibrate", "fit a cluster file's constants to measured step times; write the "
                                                "calibrated cluster file with its cross-validated error");
  c->add_option("--cluster", f->cluster, "the base cluster: preset or JSON file")->required();
  c->add_option("--framework", f->framework, "the framework of rows that do not name one (predict's --framework)")
      ->capture_default_str();
  c->add_option("--from", f->from,
                "measurements: JSON lines (predict --batch keys + measured_step_s [, measured_peak_bytes, group]), "
                "trainscope run databases, or a tune's study")
      ->expected(1, -1);
  c->add_option("--trace", f->trace,
                "fit per kernel class rates, host cost per op and collective bandwidth from traces: imported "
                "Kineto/Nsight databases (with --config) or runs recorded at --trace-level ops")
      ->expected(1, -1);
  c->add_option("--config", f->config,
                "an imported trace's configuration: predict's keys as one JSON object, or @FILE.json");
  c->add_option("-o", f->out, "the calibrated cluster file to write");
  c->add_option("--folds", f->folds,
                "k-fold cross-validation by model and cluster size (0: none; default 5, or as many as the rows' groups "
                "when fewer)")
      ->each([f](const std::string&) { f->folds_given = true; });
  c->add_option("--fit", f->fit, "constants to fit, by cluster-file path (default: those the rows move)")->delimiter(',');
  c->add_option("--max-evaluations", f->max_evaluations, "the most loss evaluations per fit")->capture_default_str();
  c->add_flag("--overwrite", f->overwrite, "replace an existing -o");
  c->add_flag("--json", f->json, "print the calibration object as JSON");
  c->add_flag("--keep-fitted", f->keep_fitted,
              "with --trace: keep the constants --cluster's calibration record fitted earlier (from a study or other "
              "rows); fit only the rest");
  c->add_flag("--replace-fitted", f->replace_fitted,
              "with --trace: replace the constants --cluster's calibration record fitted earlier with the trace's "
              "(the output records both)");
  c->add_flag("--evaluate", f->evaluate,
              "fit nothing: price the rows on --cluster (a calibrated file, or a preset) and print its errors");
  return c;
}

nlohmann::json writeCalibrated(const CalibrateFlags& f, const tn::Cluster& base,
                               const std::map<std::string, double>& values, const nlohmann::json& cal,
                               const files::OutputRule& rule) {
  const std::string original = files::readTextFile(base.source, "--cluster", "pass a cluster file");
  nlohmann::json out = nlohmann::json::parse(tn::withParams(original, values, base.source));
  nlohmann::json record = cal;
  const auto inherit = [&](const std::string& path, const nlohmann::json& value, const nlohmann::json& from) {
    if (values.count(path) || (record.contains("fitted") && record["fitted"].contains(path))) return;
    record["fitted"][path] = {{"value", value}, {"inherited", from}};
  };
  const nlohmann::json in = nlohmann::json::parse(original, nullptr, false);
  if (in.is_object() && in.contains("calibration") && in["calibration"].is_object() &&
      in["calibration"].contains("fitted") && in["calibration"]["fitted"].is_object()) {
    const std::string from = earlierSource(in["calibration"]);
    for (const auto& [path, e] : in["calibration"]["fitted"].items())
      if (e.is_object() && e.contains("value") && e["value"].is_number())
        inherit(path, e["value"], e.contains("inherited") && e["inherited"].is_string() ? e["inherited"] : nlohmann::json(from));
  }
  if (record.contains("kept") && record["kept"].is_object())  // --keep-fitted: held at the earlier value
    for (const auto& [path, k] : record["kept"].items()) inherit(path, k["value"], k["from"]);
  if (out.contains("fitted") && out["fitted"].is_object()) {  // a preset's shipped fits this one replaced
    for (const auto& [path, v] : values) out["fitted"].erase(path);
    if (out["fitted"].empty()) out.erase("fitted");
  }
  out["name"] = std::filesystem::path(f.out).stem().string();
  out["calibration"] = record;
  files::writeAtomically(f.out, out.dump(2) + "\n", rule);
  return record;
}

std::string earlierSource(const nlohmann::json& cal) {
  std::string sources;
  if (cal.contains("rows") && cal["rows"].is_array())
    for (const auto& r : cal["rows"]) {
      if (!r.is_object() || !r.contains("source") || !r["source"].is_string()) continue;
      sources += (sources.empty() ? "" : ", ") + r["source"].get<std::string>();
      if (r.contains("rows") && r["rows"].is_number_integer())
        sources += " (" + std::to_string(r["rows"].get<int64_t>()) + " rows)";
    }
  const bool traces = cal.contains("method") && cal["method"].is_string() &&
                      cal["method"].get<std::string>().rfind("from traces", 0) == 0;
  std::string s = std::string("calibrate ") + (traces ? "--trace " : "--from ") +
                  (sources.empty() ? "(sources not recorded)" : sources);
  if (cal.contains("cross_validation") && cal["cross_validation"].is_object()) s += ", cross-validated";
  if (cal.contains("date") && cal["date"].is_string()) s += ", " + cal["date"].get<std::string>();
  return s;
}

namespace {

// calibrate --evaluate: the base cluster's errors on the rows, nothing written.
int runEvaluate(const CalibrateFlags& f, const tn::Cluster& base) {
  const CalibrationRows rows = readRows(f, base);
  const tn::ErrorSummary s = tn::summarize(rows.rows, tn::priceRows(base, rows.rows));
  if (f.json) {
    std::cout << jsonText(summaryJson(s)) << "\n";
  } else {
    std::printf("trainscope calibrate --evaluate: %zu rows on %s\n", rows.rows.size(), base.name.c_str());
    printSummary("errors:", s);
    for (const std::string& n : rows.notes) std::printf("  note: %s\n", n.c_str());
  }
  return 0;
}

// The calibrated file's "calibration" object: what was fitted from which rows, and the memory model's
// error on the rows that gave a peak (runCalibrate adds the residuals, notes and cross-validation).
nlohmann::json calibrationRecord(const CalibrateFlags& f, const tn::Cluster& base, const CalibrationRows& rows,
                                 const std::vector<const tn::FitParam*>& params, const tn::FitResult& fit) {
  nlohmann::json cal;
  cal["base_cluster"] = base.source;
  cal["framework"] = f.framework;  // of rows that name none
  std::set<std::string> frameworks;  // what the rows were priced under: predict states the interval for these
  for (const tn::FitRow& r : rows.rows) frameworks.insert(tn::frameworkKey(r.options.framework));
  cal["frameworks"] = frameworks;
  cal["date"] = utcNow();
  cal["loss"] = "mean Huber loss (delta 0.05) of log(predicted / measured step time)";
  for (const tn::FitParam* p : params) {
    const auto [lo, hi] = tn::boundsOf(*p, base);
    cal["fitted"][p->path] = {{"value", fit.values.at(p->path)}, {"base", tn::getParam(base, *p)},
                              {"bounds", {lo, hi}}, {"what", p->what}};
  }
  for (const auto& [path, n] : rows.per_source) {  // which rows: a file's lines, a study's trials
    nlohmann::json entry = {{"source", path}, {"rows", n}};
    for (const char* unit : {"line", "trial"}) {
      std::vector<int64_t> at;
      const std::string prefix = path + " " + unit + " ";
      for (const tn::FitRow& r : rows.rows)
        if (r.source.rfind(prefix, 0) == 0) at.push_back(std::stoll(r.source.substr(prefix.size())));
      if (!at.empty()) entry[std::string(unit) + "s"] = rangesText(at);
    }
    cal["rows"].push_back(entry);
  }
  cal["evaluations"] = fit.evaluations;
  if (!rows.peaks.empty()) {
    std::vector<double> err;
    for (const auto& [pred, meas] : rows.peaks) err.push_back(std::fabs(double(pred) / double(meas) - 1));
    double mean = 0;
    for (double e : err) mean += e / double(err.size());
    cal["peak_residuals"] = {{"rows", int64_t(err.size())}, {"mape", mean},
                             {"max_abs_error", *std::max_element(err.begin(), err.end())},
                             {"note", "the memory model has no fitted constants: its error, as measured"}};
  }
  return cal;
}

}  // namespace


// Rows a median 30 times or more off the base cluster's predictions are in another unit
// (milliseconds for seconds), or for another machine: the fit would pin every constant at a bound and
// write a file that prices Llama-3-8B at 7% MFU (an audit's rows of 3,100 "seconds").
void refuseRowsInAnotherUnit(const std::vector<tn::FitRow>& rows, const std::vector<double>& predicted,
                             const tn::Cluster& base) {
  std::vector<double> ratio;
  for (size_t i = 0; i < rows.size() && i < predicted.size(); ++i)
    if (predicted[i] > 0 && rows[i].measured_s > 0) ratio.push_back(rows[i].measured_s / predicted[i]);
  if (ratio.empty()) return;
  std::nth_element(ratio.begin(), ratio.begin() + long(ratio.size() / 2), ratio.end());
  const double median = ratio[ratio.size() / 2];
  if (median <= 30 && median >= 1.0 / 30) return;
  char text[160];
  std::snprintf(text, sizeof(text), "the rows' measured step times are a median %.3gx what %s predicts for them", median,
                base.name.c_str());
  throw UserError("--from", std::string(text) + ": a figure in another unit (milliseconds for seconds)?",
                  "write measured_step_s in seconds, or calibrate from a cluster file of the machine that ran them "
                  "(--cluster)");
}

// The fitted constants that sit at a bound: the rows ask for more than the model lets that constant
// give (a missing term, or rows of another machine), and the file says so.
std::string atTheirBounds(const std::vector<const tn::FitParam*>& params, const std::map<std::string, double>& values,
                          const tn::Cluster& base) {
  std::string out;
  for (const tn::FitParam* p : params) {
    const auto [lo, hi] = tn::boundsOf(*p, base);
    const double v = values.at(p->path), tol = 1e-6 * std::max(std::abs(lo), std::abs(hi));
    if (std::abs(v - lo) <= tol || std::abs(v - hi) <= tol)
      out += (out.empty() ? "" : ", ") + p->path + " at its " + (std::abs(v - lo) <= tol ? "lower" : "upper") + " bound";
  }
  return out.empty() ? "" : out + ": the rows ask for more than the model lets it give (a term it lacks, or rows of "
                                  "another machine); predictions from this file lean on that bound";
}
// The flags' own consistency, before any file is read.
void checkCalibrateFlags(const CalibrateFlags& f) {
  if (f.folds < 0 || f.folds == 1)
    throw UserError("--folds", std::to_string(f.folds) + " folds", "pass 2 or more, or 0 to skip cross-validation");
  if (f.max_evaluations < 1) throw UserError("--max-evaluations", "must be 1 or more", "pass e.g. 300");
  tn::parseFramework(f.framework);
  if (f.from.empty() == f.trace.empty())
    throw UserError(f.from.empty() ? "--from" : "--trace",
                    f.from.empty() ? "is needed: the measurements to fit" : "cannot be given with --from",
                    "pass --from (measured step times) or --trace (traces, fitted per kernel class), not both");
  if (!f.config.empty() && f.trace.empty())
    throw UserError("--config", "describes an imported trace", "pass it with --trace; JSON lines give their own keys");
  if ((f.keep_fitted || f.replace_fitted) && f.trace.empty())
    throw UserError(f.keep_fitted ? "--keep-fitted" : "--replace-fitted", "applies to --trace",
                    "drop it: --from fits the constants --fit names (or the defaults) from all its rows");
  if (f.keep_fitted && f.replace_fitted)
    throw UserError("--keep-fitted", "cannot be given with --replace-fitted",
                    "choose one: keep the earlier fitted constants, or replace them with the trace's");
}

// The folds of the cross-validation: --folds, or unasked as many as the groups when fewer than 5 (a
// CPU tune's study holds one or two world sizes: the default had refused `calibrate --from study.db`),
// and none for one group, said in `not_cross_validated`.
int64_t chooseFolds(const CalibrateFlags& f, const std::set<std::string>& groups, std::string& not_cross_validated) {
  int64_t folds = f.folds;
  if (!f.folds_given && folds > int64_t(groups.size())) {
    folds = groups.size() >= 2 ? int64_t(groups.size()) : 0;
    if (folds == 0)
      not_cross_validated = "not cross-validated: the rows hold one group of model and cluster size (" + *groups.begin() +
                            "), and folds never split a group; predict's interval is the in-sample one. Add rows of "
                            "other models or cluster sizes to cross-validate";
  }
  if (folds > int64_t(groups.size()))
    throw UserError("--folds", std::to_string(folds) + " folds, but the rows hold " + std::to_string(groups.size()) +
                                   " group(s) of model and cluster size",
                    groups.size() >= 2 ? "pass --folds " + std::to_string(groups.size()) + " or fewer (0: none)"
                                       : "pass --folds 0, or add rows of other models or cluster sizes");
  return folds;
}

int runCalibrate(const CalibrateFlags& f) {
  checkCalibrateFlags(f);
  const tn::Cluster base = tn::loadCluster(f.cluster);
  if (!f.trace.empty()) return runCalibrateTrace(f, base);
  if (f.evaluate) return runEvaluate(f, base);
  if (f.out.empty()) throw UserError("-o", "is needed: the calibrated cluster file to write", "pass -o NEW.json");
  files::OutputRule rule;
  rule.field = "-o";
  rule.inputs = f.from;
  rule.inputs.push_back(base.source);
  rule.overwrite = f.overwrite;
  files::checkOutput(f.out, rule);  // before any work

  const CalibrationRows rows = readRows(f, base);
  const std::vector<const tn::FitParam*> params = chosenParams(f, base, rows);
  std::set<std::string> groups;
  for (const tn::FitRow& r : rows.rows) groups.insert(r.group);
  std::string not_cross_validated;
  const int64_t folds = chooseFolds(f, groups, not_cross_validated);

  const std::vector<double> base_s = tn::priceRows(base, rows.rows);
  refuseRowsInAnotherUnit(rows.rows, base_s, base);
  const tn::ErrorSummary before = tn::summarize(rows.rows, base_s);
  const tn::FitResult fit = tn::fitCluster(base, rows.rows, params, f.max_evaluations);
  const tn::ErrorSummary after = tn::summarize(rows.rows, fit.predicted_s);

  nlohmann::json cal = calibrationRecord(f, base, rows, params, fit);
  cal["groups"] = int64_t(groups.size());
  cal["base_residuals"] = summaryJson(before);
  cal["residuals"] = summaryJson(after);
  // As many constants as rows or more: the fit may meet every row (in-sample error near 0) whatever the
  // constants mean, and an interval from those residuals says nothing. Said, and recorded.
  std::string underdetermined;
  if (rows.rows.size() <= params.size())
    underdetermined = std::to_string(params.size()) + " constant(s) fitted to " + std::to_string(rows.rows.size()) +
                      " row(s): underdetermined, the fit may meet every row whatever the constants mean; "
                      "fit fewer (--fit) or add rows";
  for (const std::string& n : rows.notes) cal["notes"].push_back(n);
  if (!underdetermined.empty()) cal["notes"].push_back(underdetermined);
  const std::string pinned = atTheirBounds(params, fit.values, base);
  if (!pinned.empty()) cal["notes"].push_back(pinned);
  tn::ErrorSummary cv;
  if (!not_cross_validated.empty()) cal["notes"].push_back(not_cross_validated);
  if (folds >= 2) {
    const std::vector<double> held = tn::crossValidate(base, rows.rows, params, folds, f.max_evaluations);
    cv = tn::summarize(rows.rows, held);
    cal["cross_validation"] = summaryJson(cv);
    cal["cross_validation"]["folds"] = folds;
    cal["cross_validation"]["by"] = "model and cluster size (never by row)";
    cal["largest_errors"] = largestErrors(rows.rows, base_s, fit.predicted_s, held);
  } else {
    cal["largest_errors"] = largestErrors(rows.rows, base_s, fit.predicted_s, {});
  }

  cal = writeCalibrated(f, base, fit.values, cal, rule);

  if (f.json) {
    std::cout << jsonText(cal) << "\n";
    return 0;
  }
  std::printf("trainscope calibrate: %zu rows in %zu groups from %zu source(s) on %s\n", rows.rows.size(), groups.size(),
              rows.per_source.size(), base.name.c_str());
  for (const tn::FitParam* p : params)
    std::printf("  %-24s %12.6g  (was %s; bounds %.3g to %.3g)\n", p->path.c_str(), fit.values.at(p->path),
                tn::paramText(base, *p).c_str(), tn::boundsOf(*p, base).first, tn::boundsOf(*p, base).second);
  printSummary("base cluster:", before);
  printSummary("fitted (in sample):", after);
  for (const std::string& n : rows.notes) std::printf("  note: %s\n", n.c_str());
  if (!underdetermined.empty()) std::printf("  note: %s\n", underdetermined.c_str());
  if (!pinned.empty()) std::printf("  note: %s\n", pinned.c_str());
  if (!not_cross_validated.empty()) std::printf("  note: %s\n", not_cross_validated.c_str());
  if (folds >= 2) printSummary(("cross-validated, k=" + std::to_string(folds) + ":").c_str(), cv);
  std::printf("wrote %s\n", f.out.c_str());
  return 0;
}

}  // namespace trainscope::apps
