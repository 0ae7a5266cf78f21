// trainscope/runtime/config.h — everything `trainscope run` can be asked to do, and its checks.
//
// Plain data, no LibTorch. `resolve()` fills derived fields (ga from gbs/mbs, the workload) and
// throws UserError naming the flag and the fix for anything inconsistent, before any work starts.
// docs/config-reference.md lists every field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "trainscope/workloads/workload.h"

namespace trainscope::runtime {

enum class Checkpointing { None, Selective, Full };
enum class Precision { FP32, BF16, FP16 };
enum class OptimizerKind { AdamW, Adafactor, Adam8bit, SGD };
enum class DeviceRequest { Auto, CPU, CUDA };

struct TrainConfig {
  // model and batch
  std::string workload = "tiny";
  int64_t seq = 0;                 // T; 0 = the workload's n_positions, capped at 1024
  int64_t mbs = 4;                 // micro-batch size (sequences)
  std::optional<int64_t> gbs;      // global batch (sequences); gbs = mbs * ga
  std::optional<int64_t> ga;       // gradient-accumulation steps (micro-batches per step)
  int64_t steps = 10;
  Checkpointing ckpt = Checkpointing::None;
  Precision precision = Precision::FP32;

  // optimisation
  OptimizerKind optimizer = OptimizerKind::AdamW;
  double lr = 6e-4;
  double min_lr_ratio = 0.1;       // cosine decays to lr * min_lr_ratio at the last step
  int64_t warmup = 0;              // linear warm-up steps
  double clip = 1.0;               // global-norm clip; 0 disables
  double weight_decay = 0.1;       // on 2-D weights only (not biases, LayerNorm)
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double momentum = 0.0;           // SGD
  int64_t adam8bit_block = 256;    // elements per quantisation block
  double fp16_init_scale = 65536;  // initial dynamic loss scale
  int64_t fp16_growth_interval = 2000;

  // data, device, output
  uint64_t seed = 1337;
  std::string data = "synthetic";  // "synthetic" or a uint16 token file (nanoGPT / llm.c layout)
  DeviceRequest device = DeviceRequest::Auto;
  std::string out;                 // run database; empty = none
  bool overwrite = false;
  std::optional<double> peak_tflops;  // for MFU/HFU; default: a known device peak, else none
  int threads = 0;                 // intra-op threads; 0 = LibTorch's default
  bool json = false;
  bool quiet = false;

  // Derived by resolve().
  workloads::Workload model;
  int64_t ga_steps = 1;            // resolved ga
  int64_t global_batch = 0;        // resolved gbs

  int64_t tokensPerStep() const { return global_batch * seq; }
};

// Fills the derived fields and checks everything; throws UserError naming the field.
void resolve(TrainConfig& c);

// String forms, used by the CLI, the run database and the JSON summary.
const char* toString(Checkpointing v);
const char* toString(Precision v);
const char* toString(OptimizerKind v);
const char* toString(DeviceRequest v);
// Parsers throw UserError(field, ...) listing the accepted values.
Checkpointing parseCheckpointing(const std::string& s, const std::string& field = "--ckpt");
Precision parsePrecision(const std::string& s, const std::string& field = "--precision");
OptimizerKind parseOptimizer(const std::string& s, const std::string& field = "--optimizer");
DeviceRequest parseDevice(const std::string& s, const std::string& field = "--device");

// The whole config as one JSON object (stored as meta.config in the run database).
std::string toJson(const TrainConfig& c);

}  // namespace trainscope::runtime
