// checkpoint_dir.h — `run --save DIR`, `--resume DIR`, `--init-from DIR` (internal to the runtime).
//
// DIR holds the model in the Hugging Face layout (config.json, model.safetensors or shards with
// model.safetensors.index.json: transformers.AutoModelForCausalLM.from_pretrained(DIR) loads it as
// it is) and, in DIR/trainscope/, what a resumed run needs besides: state.json (step, loss scaler,
// data position, layout, the run config) and the optimizer state — optimizer.safetensors when every
// rank holds the same, else optimizer-rank-R.safetensors per rank (ZeRO, TP, PP, EP shards) — and,
// under --precision fp8, the FP8 linears' amax histories and scales (fp8_state.h).
//
// Written atomically: every file goes into a new folder .DIR.tmp-XXXXXX beside DIR, is fsynced, and
// the folder then takes DIR's place in one rename (renameat2 RENAME_EXCHANGE when DIR exists, so
// that DIR is at every instant a whole checkpoint, the previous or the new one); the previous one's
// files are then removed. DIR is never followed as a link, and an existing DIR is replaced only
// when it is an earlier trainscope checkpoint (trainscope/state.json) or an empty folder.
// docs/checkpoints.md has the layout and the rules.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "trainscope/runconfig/config.h"
#include "trainscope/runtime/gpt.h"
#include "trainscope/runtime/trainer.h"

namespace trainscope::runtime {

class Comm;
struct Layout;

// Throws a UserError naming `field` unless DIR may be written as a checkpoint (see above).
void checkCheckpointTarget(const std::string& dir, const std::string& field);
// Empty when cfg's layout can save a checkpoint; else why not.
std::string whyCannotSave(const TrainConfig& cfg);

struct SavedCheckpoint {
  int64_t step = 0;     // steps done when saved
  int64_t bytes = 0;    // every file written, all ranks
  double seconds = 0;   // from the first write to the swap
};

// Collective: every rank calls it after the same step. `kill_mid_write`: testing seam, rank 0 dies
// of SIGKILL after the weights are written and before the checkpoint is complete.
SavedCheckpoint saveCheckpoint(const std::string& dir, const TrainConfig& cfg, const Trainer& trainer, Comm& comm,
                               int64_t shard_bytes, bool kill_mid_write);

struct LoadedCheckpoint {
  GptWeights full;                    // the whole model, fp32, CPU
  bool resumed = false;               // trainer state below is set
  Trainer::Resumable resumable;
  std::vector<at::Tensor> optimizer;  // this rank's optimizer state (CPU), Optimizer::stateTensors order
  nlohmann::json per_parameter;       // non-null: resumed under another layout, from this (optim_state.h)
  nlohmann::json fp8;                 // non-null: the FP8 scaling state to restore (fp8_state.h)
  std::string notice;                 // non-empty: the state resumed under another layout is not exact (why)
};

// --init-from (weights only) or --resume (weights, then this rank's trainer state: a layout whose
// optimizer state differs from the saved one is refused with the reason). `field` names the flag.
LoadedCheckpoint loadCheckpoint(const std::string& dir, const TrainConfig& cfg, int rank, bool resume,
                                const std::string& field);
// What loadCheckpoint refuses without reading tensors (state/resume_check.h): the model, and for
// --resume the saved step against --steps, the data, seq, global batch, optimizer and precision. The
// launcher calls it once before starting ranks, so that they are not started only to refuse.
void checkCheckpointBeforeLaunch(const std::string& dir, const TrainConfig& cfg, bool resume, const std::string& field);
// A resumed checkpoint's trainer state into `trainer`: this rank's saved optimizer tensors (same
// layout), or its pieces cut from the state saved per parameter name (another layout).
void restoreTrainer(const LoadedCheckpoint& c, Trainer& trainer, const Layout& layout, const std::string& dir,
                    const std::string& field);
// Checks a loaded checkpoint's optimizer state against the trainer's (count, shapes, dtypes).
void checkOptimizerState(const LoadedCheckpoint& c, const Trainer& trainer, const std::string& dir,
                         const std::string& field);

}  // namespace trainscope::runtime
