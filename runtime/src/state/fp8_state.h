// fp8_state.h — --precision fp8's scaling state in a checkpoint (internal to the runtime).
//
// Each FP8 linear (model/fp8.h) keeps, per role (input, weight, grad_output), the amax history of
// the last kHistory steps and the scale derived from it. Both are the same on every data-, tensor-
// and context-parallel rank of a stage (each step's amaxes are reduced over those groups, and the
// maximum over a tensor's shards is the whole tensor's), so they are saved once per stage, per
// Hugging Face parameter name like the optimizer state per parameter (optim_state.h), and any layout
// maps them back by the names of its own linears: trainscope/fp8-scales.safetensors (under pp:
// fp8-scales-0000S-of-0000P.safetensors per stage), one F64 tensor `ROLE/HF_NAME` per role and name
// holding [scale, history oldest … newest]. A fused runtime tensor (c_attn: q, k and v; SwiGLU's
// c_fc: gate and up) is written under each of its Hugging Face names, and read from the first.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "trainscope/runconfig/config.h"
#include "trainscope/runtime/trainer.h"

namespace trainscope::runtime {

class Comm;

// Writes this stage's FP8 scaling state into `tmp`/trainscope (the stage's first rank writes); no
// collective. Returns what state.json records of it ({"files", "history"}), or null without fp8.
nlohmann::json saveFp8State(const std::string& tmp, const TrainConfig& cfg, const Trainer& trainer, Comm& comm);

// Sets the trainer's FP8 linears' histories and scales from the state recorded as `rec` in
// checkpoint `dir` (whatever layout saved it). Errors are UserErrors naming `field`.
void loadFp8State(const std::string& dir, const nlohmann::json& rec, const TrainConfig& cfg, Trainer& trainer,
                  const std::string& field);

}  // namespace trainscope::runtime
