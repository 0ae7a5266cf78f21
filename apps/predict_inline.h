// predict_inline.h — a `predict --batch` line's "workload" or "cluster" given as a JSON object (a
// workload definition, a Hugging Face config.json's object, a cluster file's object) rather than a
// name or path, as a line generated from Python naturally writes it.
//
// flagsFromJson keeps the object's text in the flag's string behind kInlineObject (a control
// character no name or path a user types begins with); predict's loader parses it with the loaders
// of the files (workloads::parse, models::parseCluster) from that text: nothing is written to disk.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "trainscope/tuner/models.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::apps {

inline constexpr char kInlineObject[] = "\x01json:";

// The flag's string for a line's object (kInlineObject + its compact text).
std::string inlineKey(const nlohmann::json& object);
bool isInline(const std::string& name_or_path);

// The workload or cluster of an inline key. Errors name the field as the files' loaders do, the
// object in place of the file: "workload.n_head: missing in the workload object", "cluster.peak_tflops:
// …" (runBatch puts "--batch line N: " before them). A nameless object is named "inline workload" /
// "inline cluster" (or by a Hugging Face config's "_name_or_path").
workloads::Workload inlineWorkload(const std::string& key);
tuner::Cluster inlineCluster(const std::string& key, int64_t nodes);

}  // namespace trainscope::apps
