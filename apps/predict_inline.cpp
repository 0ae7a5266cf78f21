// predict_inline.cpp — see predict_inline.h.
#include "predict_inline.h"

#include <cstring>

#include "trainscope/common/error.h"

namespace trainscope::apps {

namespace {

const char kWorkloadSource[] = "the workload object";
const char kClusterSource[] = "the cluster object";

std::string objectText(const std::string& key) { return key.substr(std::strlen(kInlineObject)); }

}  // namespace

std::string inlineKey(const nlohmann::json& object) { return kInlineObject + object.dump(); }

bool isInline(const std::string& name_or_path) { return name_or_path.rfind(kInlineObject, 0) == 0; }

workloads::Workload inlineWorkload(const std::string& key) {
  const std::string text = objectText(key);
  // The loader's errors already read "workload.KEY: … in the workload object".
  workloads::Workload w = workloads::parse(text, kWorkloadSource);
  const nlohmann::json j = nlohmann::json::parse(text);
  if (!j.contains("name")) {  // else the loader names it after the source, a path it does not have
    const auto hf_name = j.find("_name_or_path");
    w.name = hf_name != j.end() && hf_name->is_string() && !hf_name->get<std::string>().empty()
                 ? hf_name->get<std::string>()
                 : "inline workload";
  }
  w.source.clear();  // no file: the hints that name one (`trainscope run --workload …`) use the name
  return w;
}

tuner::Cluster inlineCluster(const std::string& key, int64_t nodes) {
  const std::string text = objectText(key);
  const std::string file_prefix = std::string("--cluster ") + kClusterSource + ": ";
  tuner::Cluster c;
  try {
    c = models::parseCluster(text, kClusterSource);
  } catch (const UserError& e) {
    // The file loader's "--cluster FILE: KEY: …" as "cluster.KEY: …" (the line's key, not the flag).
    const std::string& field = e.field();
    const std::string what = e.what();
    const std::string rest = what.size() > field.size() + 2 ? what.substr(field.size() + 2) : what;
    if (field.rfind(file_prefix, 0) == 0) throw UserError("cluster." + field.substr(file_prefix.size()), rest, "");
    if (field == "--cluster") throw UserError("cluster", rest, "");
    throw;
  }
  if (!nlohmann::json::parse(text).contains("name")) c.name = "inline cluster";
  c.source.clear();
  models::setClusterNodes(c, nodes);
  return c;
}

}  // namespace trainscope::apps
