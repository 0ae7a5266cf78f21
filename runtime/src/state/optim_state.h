// optim_state.h — the optimizer state of a checkpoint in a layout-free form (internal to the
// runtime): per Hugging Face parameter name, as the weights are, so that a run resumes under another
// data-parallel degree, ZeRO stage, tp, pp or ep than the one that saved it (docs/checkpoints.md).
//
// Every optimizer's state has such a form (Optimizer::elementwise): AdamW's exp_avg and exp_avg_sq
// and SGD's momentum buffer as they are; 8-bit Adam's moments dequantised to fp32 and Adafactor's
// factors broadcast over their matrices, the state re-made from them when read (Elementwise::commit;
// not bit for bit across another split, docs/checkpoints.md). Each kind is a tensor of its parameter's shape, put
// together from the ranks' pieces exactly as the weights are (ZeRO's slices over the ranks that split
// them, TP shards, experts over ep ranks, gather.h) and written as `KIND/HF_NAME` in
// trainscope/optimizer-hf.safetensors (under pp: optimizer-hf-0000S-of-0000P.safetensors per stage).
// Read back, each rank cuts its pieces from the whole tensors as it cuts its weights.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/runconfig/config.h"
#include "trainscope/runtime/trainer.h"

namespace trainscope::runtime {

class Comm;
struct Layout;

// Collective over every rank (like gatherStage): writes this stage's layout-free optimizer state
// into the folder `tmp`/trainscope (the stage's first rank writes). Returns what state.json records
// of it ({"kinds", "files", "counter"}), or null when the optimizer's state is not elementwise.
nlohmann::json saveLayoutFree(const std::string& tmp, const TrainConfig& cfg, const Trainer& trainer, Comm& comm);

// Reads the layout-free state recorded as `rec` in checkpoint `dir` into the trainer's optimizer
// (this rank's pieces). Errors are UserErrors naming `field`.
void loadLayoutFree(const std::string& dir, const nlohmann::json& rec, const TrainConfig& cfg, Trainer& trainer,
                    const Layout& layout, const std::string& field);

}  // namespace trainscope::runtime
