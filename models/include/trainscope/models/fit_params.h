// trainscope/models/fit_params.h — the constants of a cluster file that `trainscope calibrate` may fit
// (docs/time-model.md, "Calibration"), by their dotted path in the file, with physical bounds.
//
// One list, fitParams(): each entry names its path ("dispatch_s", "inter_node.efficiency",
// "frameworks.fsdp.hook_s", …), its bounds, what it is, and where it lives in a parsed Cluster. A
// constant that a new time-model term adds is one more line in the list (the block marked
// "physics:" in fit_params.cpp). Bounds are physical: efficiencies in (0, 1], times from 0 to a
// stated ceiling; a rate (a CPU's measured FLOP/s or bytes/s) is bounded relative to the base file's
// figure (`relative`: lower and upper are multiples of it).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "trainscope/models/cluster.h"

namespace trainscope::models {

struct FitParam {
  std::string path;        // dotted path in the cluster file
  double lower = 0, upper = 1;
  std::string what;        // one line, for --help and the calibration record
  std::function<double&(Cluster&)> ref;  // the field in a parsed Cluster
  bool relative = false;   // bounds are multiples of the base cluster's value
  std::string kind;        // "gpu" or "cpu": fitted by default only on that kind of cluster ("": both)
  bool by_default = true;  // fitted without --fit (when the rows move it); false: only when named
  // A tighter ceiling on a GPU cluster (0: `upper`): a per-op host cost, which a CPU cluster's ops
  // (the work itself, run by the host) may exceed, is 5-50 us where the host only issues GPU kernels.
  double gpu_upper = 0;
};

const std::vector<FitParam>& fitParams();
// The entry for `path`, or a UserError naming `field` and the paths there are.
const FitParam& fitParam(const std::string& path, const std::string& field);

double getParam(const Cluster& c, const FitParam& p);
// The value as a person reads it: "1e-05", or for a per-op host cost the file leaves unset (< 0),
// "unset: dispatch_s 1e-05" (what the model then uses).
std::string paramText(const Cluster& c, const FitParam& p);
void setParam(Cluster& c, const FitParam& p, double value);
// The bounds of `p` for this base cluster (relative ones multiplied out).
std::pair<double, double> boundsOf(const FitParam& p, const Cluster& base);

// The cluster file's JSON text with each path set to its value (objects made where missing); the
// rest of the file as it was. `matmul_efficiency` and other non-scalar fields are left alone.
std::string withParams(const std::string& cluster_json, const std::map<std::string, double>& values,
                       const std::string& source);

// The interval a calibrated cluster file states for its predictions: "±x% from the calibration of
// FILE" (x: the cross-validated 90th percentile of |predicted/measured − 1|, else the fit's own),
// or "" when the file carries no "calibration" object. Reads the file at `path` (the Cluster's
// source); a file that cannot be read or parsed gives "".
struct CalibrationInterval {
  double pm = 0;          // the ± share (0.07 = ±7%)
  std::string file;       // the file it came from
  bool held_out = false;  // pm is the cross-validation's (rows not fitted to); false: the fit's own rows
  std::vector<std::string> frameworks;  // the frameworks its rows were priced under (empty: not recorded)
  bool covers(const std::string& framework) const;  // whether the interval speaks for that framework's predictions
  std::string text() const;  // "±7.0% from the calibration of FILE"
};
bool calibrationInterval(const std::string& path, CalibrationInterval& out);

}  // namespace trainscope::models
