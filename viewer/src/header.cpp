// header.cpp — an imported trace's header line (see header.h).
#include "trainscope/viewer/header.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "trainscope/rundb/merge.h"

#include "trainscope/viewer/view_state.h"

namespace trainscope::viewer {

namespace {

std::string baseName(const std::string& p) {
  const size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// The sum of a meta entry's JSON object of counts (import_refused_values, …); 0 when absent or not one.
int64_t metaCounts(const Trace& t, const std::string& key) {
  auto it = t.meta.find(key);
  if (it == t.meta.end()) return 0;
  const nlohmann::json j = nlohmann::json::parse(it->second, nullptr, false);
  int64_t n = 0;
  if (j.is_object())
    for (const auto& [k, v] : j.items())
      if (v.is_number_integer()) n += v.get<int64_t>();
  return n;
}

std::string sources(const Trace& t) {
  auto it = t.meta.find("import_files");
  const nlohmann::json j = it == t.meta.end() ? nlohmann::json() : nlohmann::json::parse(it->second, nullptr, false);
  if (!j.is_array() || j.empty()) return "a trace (files not recorded: imported before the header existed)";
  std::string out;
  for (const auto& f : j) {
    if (!f.is_object()) continue;
    const std::string format = f.value("format", ""), file = baseName(f.value("file", ""));
    out += (out.empty() ? "" : ", ") +
           std::string(format == "nsys" ? "Nsight Systems export " : format == "kineto" ? "PyTorch profiler trace " : "") +
           file + " -> rank " + std::to_string(f.value("rank", int64_t(0))) +
           (f.contains("gpu") && f["gpu"].is_string() ? " (" + f["gpu"].get<std::string>() + ")" : "");
  }
  return out;
}

}  // namespace

std::string importHeader(const Trace& t) {
  auto src = t.meta.find("source");
  if (src == t.meta.end() || src->second != "import") return {};
  std::string h = "imported: " + sources(t) + " · rank" + (t.ranks.size() == 1 ? " " : "s ");
  for (size_t i = 0; i < t.ranks.size(); ++i) h += (i ? ", " : "") + std::to_string(t.ranks[i].rank);
  if (t.ranks.empty()) h += "none";
  h += " · span " + formatDuration(double(t.end > t.begin ? t.end - t.begin : 0));
  std::string procs;
  for (const RankGroup& g : t.ranks)
    if (!g.process.empty()) procs += (procs.empty() ? "" : "; ") + ("rank " + std::to_string(g.rank) + " " + g.process);
  if (!procs.empty()) h += " · processes: " + procs;
  int64_t dropped = 0;
  for (const rundb::Drop& d : t.drops) dropped += d.dropped;
  const int64_t refused = metaCounts(t, "import_refused_values"), ignored = metaCounts(t, "import_ignored_device_events");
  if (dropped + refused + ignored == 0) return h + " · nothing dropped";
  if (dropped) h += " · dropped " + std::to_string(dropped) + " event" + (dropped == 1 ? "" : "s");
  if (refused) h += " · " + std::to_string(refused) + " value" + (refused == 1 ? "" : "s") + " refused";
  if (ignored) h += " · " + std::to_string(ignored) + " device event" + (ignored == 1 ? "" : "s") + " of unread categories";
  return h + " (Summary lists them)";
}

std::string unmergedTraceHeader(const std::string& path, const Trace& t) {
  for (const Track& k : t.tracks)  // the steps rows and the MoE counters come from the steps' tables
    if (k.kind != TrackKind::Steps && k.kind != TrackKind::Counter)
      for (const auto& lane : k.lanes)
        if (!lane.events.empty()) return {};
  const auto meta = [&](const char* key) {
    const auto it = t.meta.find(key);
    return it == t.meta.end() ? std::string() : it->second;
  };
  std::string note = rundb::unmergedEventsNote(path, meta("trace_level"), meta("source"), "open");
  // The ranks whose shards hold nothing (rank 0 failed first: no step, no config here), named.
  if (!note.empty())
    if (const std::string silent = rundb::silentRanksNote(path); !silent.empty()) note += "; " + silent;
  return note;
}

}  // namespace trainscope::viewer
