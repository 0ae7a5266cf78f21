// calibrate_parts.h — the parts calibrate_command.cpp (rows of step times) and calibrate_trace.cpp
// (rows of traces, fitted per kernel class) share.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "calibrate_command.h"
#include "trainscope/common/files.h"
#include "trainscope/tuner/fit.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::apps {

// A row the memory model puts over the device's memory, yet measured (said in one note per kind).
struct OverMemoryRow {
  int64_t line = 0;             // its line in the JSON-lines file
  int64_t predicted_bytes = 0;  // the peak predict's "fits" is judged on
  int64_t device_bytes = 0;
  bool peak_measured = false;   // the line gave measured_peak_bytes
};

// The measured rows of --from (calibrate_rows.cpp).
struct CalibrationRows {
  std::vector<tuner::FitRow> rows;                  // each row's source: "FILE line N", "STUDY trial N" or the database
  std::vector<std::pair<int64_t, int64_t>> peaks;   // (predicted, measured) where a row gave one
  std::vector<std::pair<std::string, int64_t>> per_source;  // each --from file and its row count
  std::map<std::string, std::shared_ptr<const workloads::Workload>> workloads;  // by name or inline text
  std::vector<std::string> notes;  // said and recorded: lines repeated, rows the memory model says cannot fit
  std::vector<OverMemoryRow> over_memory;  // the current file's, until readLines groups them into notes
};
// Reads every --from input, each priced on `base`; a bad row is a UserError naming its file and line.
CalibrationRows readRows(const CalibrateFlags& f, const tuner::Cluster& base);

nlohmann::json summaryJson(const tuner::ErrorSummary& s);
std::string utcNow();
void printSummary(const char* what, const tuner::ErrorSummary& s);
// The row of one --trace database: its recorded configuration, else --config's, measured at step_s.
tuner::FitRow traceRow(const CalibrateFlags& f, const tuner::Cluster& base, const std::string& path, double step_s);
// The calibrated cluster file -o: --cluster's file with the fitted `values` put in, named after -o,
// with its "calibration" record `cal`; written atomically under `rule`. What --cluster recorded as
// fitted and this calibration did not refit stays in the record's "fitted", marked "inherited" (where
// from), so that a later --trace still guards it; a preset's own "fitted" loses the paths written.
// Returns the record written.
nlohmann::json writeCalibrated(const CalibrateFlags& f, const tuner::Cluster& base,
                               const std::map<std::string, double>& values, const nlohmann::json& cal,
                               const files::OutputRule& rule);
// Where a calibration record's constants came from, in words ("calibrate --from study.db (24 rows), DATE").
std::string earlierSource(const nlohmann::json& cal);
// `calibrate --trace`: fit, write -o with its "calibration" record (or --evaluate: print the errors).
int runCalibrateTrace(const CalibrateFlags& f, const tuner::Cluster& base);

}  // namespace trainscope::apps
