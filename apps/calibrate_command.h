// calibrate_command.h — `trainscope calibrate`: fit a cluster file's constants (models/fit_params.h)
// to measured step times and write a calibrated cluster file (docs/time-model.md, "Calibration").
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace trainscope::apps {

struct CalibrateFlags {
  std::string cluster, framework = "trainscope", out;
  std::vector<std::string> from;
  std::vector<std::string> trace;  // --trace: databases fitted per kernel class (calibrate_trace.cpp)
  std::string config;              // --config: an imported trace's configuration (predict's keys)
  std::vector<std::string> fit;  // dotted paths; empty: the cluster kind's identifiable defaults
  int64_t folds = 5;             // 0: no cross-validation
  bool folds_given = false;      // --folds passed; else 5, or the groups there are when fewer (one: none, said)
  int64_t max_evaluations = 300;
  bool overwrite = false, json = false;
  bool evaluate = false;         // price the rows on --cluster and print its errors; fit and write nothing
  // --trace on a file whose "calibration" record fitted some of the constants the trace would set:
  // keep those and fit the rest, or replace them (both sources recorded). Neither: refused, listed.
  bool keep_fitted = false, replace_fitted = false;
};

CLI::App* addCalibrateCommand(CLI::App& app, CalibrateFlags*& flags);
int runCalibrate(const CalibrateFlags& flags);

}  // namespace trainscope::apps
