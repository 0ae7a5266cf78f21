// resume_check.h — what can be checked of a checkpoint folder against a run without loading its
// tensors: its model (config.json), and for --resume its trainer state's counters and the settings
// the data position and optimizer depend on (trainscope/state.json). loadCheckpoint runs these in
// each rank; the launcher runs them once before any rank starts (checkCheckpointBeforeLaunch), so
// that a checkpoint the run cannot continue is refused once, not by every rank after launch.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "trainscope/runconfig/config.h"
#include "trainscope/runtime/trainer.h"

namespace trainscope::runtime {

// DIR exists, is a folder, and its config.json describes cfg's model (UserError naming `field`).
void checkCheckpointModel(const std::string& dir, const TrainConfig& cfg, bool resume, const std::string& field);
// state.json's counters (each a whole number in range: UserError naming the key when damaged).
Trainer::Resumable savedCounters(const nlohmann::json& s, const std::string& dir, const std::string& field);
// The counters, once checked against cfg: --steps past the saved step, the same data, seq, global
// batch, optimizer and precision. May throw nlohmann::json::exception for a value of the wrong type.
Trainer::Resumable checkResumeAgainst(const nlohmann::json& s, const std::string& dir, const TrainConfig& cfg,
                                      const std::string& field);

}  // namespace trainscope::runtime
