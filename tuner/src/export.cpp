// export.cpp — a TrainConfig in other tools' formats (see export.h). Each format is one function;
// the keys and flags are the targets' own, checked against their code and documentation:
//   Megatron-LM   megatron/training/arguments.py
//   DeepSpeed     the config JSON (deepspeed/runtime/config.py, lr_schedules.py: WarmupCosineLR)
//   Accelerate    accelerate/commands/config/config_args.py: ClusterConfig's fields
//   Transformers  TrainingArguments' fields
#include "trainscope/tuner/export.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/json_text.h"
#include "trainscope/models/zero.h"
#include "trainscope/workloads/hf_config.h"

#include "export_model.h"

namespace trainscope::tuner {
namespace {

namespace rt = trainscope::runconfig;

struct FormatName {
  ExportFormat format;
  const char* name;
};
constexpr FormatName kFormats[] = {
    {ExportFormat::Run, "run"},
    {ExportFormat::Command, "command"},
    {ExportFormat::Megatron, "megatron"},
    {ExportFormat::DeepSpeed, "deepspeed"},
    {ExportFormat::Accelerate, "accelerate"},
    {ExportFormat::AccelerateConfig, "accelerate-config"},
    {ExportFormat::TrainingArgs, "training-args"},
    {ExportFormat::HfConfig, "hf-config"},
    {ExportFormat::Torchtitan, "torchtitan"},
};

std::string runJson(const rt::TrainConfig& c) { return jsonText(nlohmann::json::parse(rt::toJson(c)), 2) + "\n"; }

// Every argument quoted for a POSIX shell: a path may hold anything, and these lines get pasted.
std::string commandLines(const rt::TrainConfig& c) {
  const auto line = [&](rt::Launcher launcher) {
    rt::TrainConfig x = c;
    x.launcher = launcher;
    std::string args;
    for (const auto& a : rt::toArgs(x)) args += " " + files::shellQuote(a);
    return "trainscope run" + args;
  };
  std::ostringstream o;
  o << "# local\n" << line(rt::Launcher::Local) << "\n";
  o << "# Slurm: inside an allocation of " << c.world << " task(s), e.g. salloc --ntasks " << c.world << "\n";
  o << line(rt::Launcher::Slurm) << "\n";
  return o.str();
}

// Megatron-LM's --moe-layer-freq (arguments.py's moe_freq_type): N for experts on the layers l with
// l % N == 0 (the workload's moe_every), or a pattern's Python list, one 1 (MoE) or 0 (dense, of
// --ffn-hidden-size) per layer, quoted for the shell: '[0,1,0,1]' for a Qwen2-MoE config's
// decoder_sparse_step 2 with mlp_only_layers [0].
std::string moeLayerFreq(const workloads::Workload& w) {
  if (w.moe_pattern.empty()) return std::to_string(w.moe_every);
  std::string list = "'[";
  for (int64_t l = 0; l < w.n_layer; ++l) list += std::string(l ? "," : "") + (w.moeLayer(l) ? "1" : "0");
  return list + "]'";
}

// Megatron-LM's MoE flags (megatron/training/arguments.py, _add_moe_args) for a mixture-of-experts
// workload: --moe-layer-freq puts experts on the layers the workload does (moeLayerFreq); the
// experts split over --expert-model-parallel-size (the run's --ep) ranks and, as this runtime holds
// them, whole on every TP rank (--expert-tensor-parallel-size 1; Megatron-LM's default splits them
// over tp). Tokens go by all-to-all, the runtime's dispatch and the only one Megatron-LM's capacity
// factor takes (TransformerConfig refuses it with another dispatcher). The runtime drops an expert's
// assignments past its capacity in priority order (every first choice before any second, then token
// order), Megatron-LM's "position" drop policy, without padding to capacity; drop-less: no capacity.
void megatronMoe(std::ostringstream& o, const rt::TrainConfig& c) {
  const workloads::Workload& w = c.model;
  if (!w.isMoe()) return;
  o << " --num-experts " << w.n_experts << " --moe-router-topk " << w.top_k << " --moe-layer-freq " << moeLayerFreq(w)
    << " --moe-ffn-hidden-size " << w.expertHidden() << " --expert-model-parallel-size " << c.ep
    << " --expert-tensor-parallel-size 1 --moe-token-dispatcher-type alltoall"
    << " --moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff " << w.aux_loss_coeff;
  if (w.z_loss_coeff > 0) o << " --moe-z-loss-coeff " << w.z_loss_coeff;
  if (w.capacity_factor > 0)
    o << " --moe-expert-capacity-factor " << w.capacity_factor << " --moe-token-drop-policy position";
  // The shared expert at its own width (Qwen2-MoE's shared_expert_intermediate_size) and its sigmoid
  // gate (TransformerConfig.moe_shared_expert_gate: sigmoid(x·g) times the shared output, as Qwen2-MoE's).
  if (w.shared_expert) o << " --moe-shared-expert-intermediate-size " << w.sharedExpertHidden();
  if (w.shared_expert && w.shared_expert_gate) o << " --moe-shared-expert-gate";
  // Megatron-LM's default router takes the softmax over the k chosen logits, i.e. the chosen gates
  // renormalised; gates that keep the full softmax's probabilities (Switch's top-1, Qwen2-MoE's
  // norm_topk_prob false) are its softmax before the top-k (--moe-router-pre-softmax).
  if (!w.renormalisesGates()) o << " --moe-router-pre-softmax";
}

// Where Megatron-LM's MoE differs from this run's: its distributed optimizer shards the experts'
// state over their expert-data-parallel group (dp/ep ranks), where this runtime keeps it whole.
void megatronMoeNotes(const rt::TrainConfig& c, std::vector<std::string>& notes) {
  if (!c.model.isMoe() || c.ep <= 1 || !rt::shardsOptimizer(c.zero)) return;
  notes.push_back("--use-distributed-optimizer also shards the experts' optimizer state over their " +
                  std::to_string(c.dp / c.ep) + " expert-data-parallel rank(s); this runtime keeps each rank's " +
                  std::to_string(c.model.n_experts / c.ep) + " experts' state whole under ZeRO with --ep " +
                  std::to_string(c.ep));
}

// Layers that do not divide over the pipeline stages. This runtime gives the remainder to the earlier
// stages (models::stageLayout: 126 layers over 16 stages, 14 of 8 then 2 of 7); Megatron-LM refuses an
// uneven split unless the first and last stages' layers are named (--decoder-first/last-pipeline-
// num-layers; the middle stages then split the rest evenly: megatron-core's get_num_layers_to_build).
// The middle stages take as many as this runtime's largest, so the slowest stage (what the step waits
// for) is the one priced; the first and last split what is left. Interleaved plans divide evenly
// (whyInvalid).
void megatronUnevenStages(std::ostringstream& o, const rt::TrainConfig& c, std::vector<std::string>& notes) {
  const int64_t n = c.model.n_layer, p = c.pp;
  if (p < 2 || c.virtual_stages > 1 || n % p == 0) return;
  const int64_t largest = (n + p - 1) / p;
  int64_t middle = largest, rest = n - (p - 2) * middle;
  if (rest < 2 || rest > 2 * middle) {  // the middle stages at the smaller count instead
    middle = n / p;
    rest = n - (p - 2) * middle;
  }
  const int64_t first = (rest + 1) / 2, last = rest / 2;
  o << " --decoder-first-pipeline-num-layers " << first << " --decoder-last-pipeline-num-layers " << last;
  const int64_t theirs = std::max({first, last, p > 2 ? middle : int64_t(0)});
  notes.push_back("the " + std::to_string(n) + " layers do not divide over " + std::to_string(p) +
                  " stages: Megatron-LM's split is " + std::to_string(first) + " | " +
                  (p > 2 ? std::to_string(p - 2) + " x " + std::to_string(middle) + " | " : "") + std::to_string(last) +
                  " (first | middle | last), this study's " + std::to_string(n % p) + " x " + std::to_string(largest) +
                  " then " + std::to_string(p - n % p) + " x " + std::to_string(largest - 1) +
                  (theirs == largest ? ": the same largest stage, which the step waits for"
                                     : ": its largest stage holds " + std::to_string(theirs) + " layers, not " +
                                           std::to_string(largest) + " (the step is slower than priced)"));
}

// Megatron-LM's pretrain_gpt.py flags. This runtime's GPT has no dropout (Megatron-LM's default is
// 0.1 for both) and pads its vocabulary to a multiple of tp only: --make-vocab-size-divisible-by 1
// gives Megatron-LM the same padded size (it pads to a multiple of that × tp). --vocab-size is what
// Megatron-LM reads with --tokenizer-type NullTokenizer; other tokenizers bring their own size.
ExportResult megatron(const rt::TrainConfig& c) {
  ExportResult r;
  std::ostringstream o;
  o << "--num-layers " << c.model.n_layer << " --hidden-size " << c.model.n_embd << " --num-attention-heads "
    << c.model.n_head << " --seq-length " << c.seq << " --max-position-embeddings " << c.model.n_positions
    << " --vocab-size " << c.model.vocab_size << " --make-vocab-size-divisible-by 1"
    << " --hidden-dropout 0 --attention-dropout 0";
  detail::megatronArchitecture(o, c, r.notes);
  o << " --tensor-model-parallel-size " << c.tp << " --pipeline-model-parallel-size " << c.pp << " --micro-batch-size "
    << c.mbs << " --global-batch-size " << c.global_batch << " --lr " << c.lr << " --min-lr " << c.lr * c.min_lr_ratio
    << " --lr-decay-style cosine --lr-warmup-iters " << c.warmup << " --train-iters " << c.steps << " --weight-decay "
    << c.weight_decay << " --clip-grad " << c.clip << " --adam-beta1 " << c.beta1 << " --adam-beta2 " << c.beta2
    << " --adam-eps " << c.eps << " --seed " << c.seed;
  if (c.precision == rt::Precision::BF16) o << " --bf16";
  // fp8: Transformer Engine's HYBRID format with this runtime's delayed, tensor-wise scaling
  // (runtime/src/model/fp8.h), every term of the recipe said rather than left to megatron-core's
  // defaults (its amax history is 1 and its algorithm most_recent; its recipe default may move):
  // recipe delayed, history 16, the max of it, margin 0. What megatron-core's defaults already say
  // as this runtime does (FP8 weight gradients, bf16 parameters and attention core, every block in
  // FP8, amaxes reduced over DP, TP and CP) is checked by bench/check_exports_megatron.py.
  if (c.precision == rt::Precision::FP8)
    o << " --bf16 --fp8-format hybrid --fp8-recipe delayed --fp8-margin 0 --fp8-amax-history-len 16 "
         "--fp8-amax-compute-algo max";
  if (c.precision == rt::Precision::FP16) o << " --fp16 --initial-loss-scale " << c.fp16_init_scale;
  if (c.ckpt == rt::Checkpointing::Selective) o << " --recompute-granularity selective";
  if (c.ckpt == rt::Checkpointing::Full)
    o << " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1";
  if (c.sequence_parallel) o << " --sequence-parallel";
  // Interleaved 1F1B: v chunks of L/(p·v) layers per pipeline rank (arguments.py derives
  // virtual_pipeline_model_parallel_size from it).
  if (c.virtual_stages > 1) o << " --num-layers-per-virtual-pipeline-stage " << c.model.n_layer / (c.pp * c.virtual_stages);
  megatronUnevenStages(o, c, r.notes);
  if (c.cp > 1) o << " --context-parallel-size " << c.cp;
  if (rt::shardsOptimizer(c.zero)) o << " --use-distributed-optimizer";
  // The DP reduction in Megatron's DDP buckets during the last backward, and with the distributed
  // optimizer the parameters' all-gather beside the next forward: the same numbers, less waiting
  // (models' exportedJobOptions prices them; docs/framework-profiles.md, "Megatron-LM's overlaps").
  if (c.dp * c.cp > 1) o << " --overlap-grad-reduce";
  if (c.dp * c.cp > 1 && rt::shardsOptimizer(c.zero)) o << " --overlap-param-gather";
  megatronMoe(o, c);
  o << " --optimizer " << (c.optimizer == rt::OptimizerKind::SGD ? "sgd" : "adam") << "\n";
  r.text = o.str();
  if (c.pp > 1 && c.pp_schedule == rt::PipelineSchedule::GPipe)
    r.notes.push_back("Megatron-LM has no GPipe schedule; it runs 1F1B");
  megatronMoeNotes(c, r.notes);
  if (c.zero >= rt::ZeroStage::Gradients)
    r.notes.push_back(
        "Megatron-LM's distributed optimizer shards the optimizer state and reduce-scatters the gradients, but keeps "
        "the whole gradient buffer" +
        std::string(c.zero == rt::ZeroStage::Parameters ? " and the whole parameters" : "") + ": ZeRO-" +
        std::to_string(rt::stageNumber(c.zero)) + "'s memory is Megatron-FSDP's (--use-megatron-fsdp "
        "--data-parallel-sharding-strategy " + (c.zero == rt::ZeroStage::Parameters ? "optim_grads_params" : "optim_grads") +
        " --ckpt-format fsdp_dtensor), not in these flags");
  if (c.optimizer == rt::OptimizerKind::Adafactor || c.optimizer == rt::OptimizerKind::Adam8bit)
    r.notes.push_back(std::string("Megatron-LM has no ") + toString(c.optimizer) + "; the flags say adam");
  return r;
}

// ZeRO-3 sharded within groups of zero_shard_size DP ranks and replicated across them (0 or dp: all).
bool hybridShard(const rt::TrainConfig& c) {
  return c.zero == rt::ZeroStage::Parameters && c.zero_shard_size > 0 && c.zero_shard_size < c.dp;
}

// DeepSpeed's zero_optimization (deepspeed/runtime/zero/config.py) with the bucket sizes the models
// price (models/zero.h: DeepSpeed's defaults, in elements). overlap_comm: the gradient reduction
// overlapped with backward, as this runtime's is (DeepSpeed's default is off below stage 3);
// contiguous_gradients: gradients copied into one buffer as they are produced (stage 2 and 3).
// Stage 3: the prefetch bucket, parameters under the persistence threshold left whole (DeepSpeed's
// default, 1e5 elements) and at most stage3_max_live_parameters gathered at once (its default, 1e9).
nlohmann::json zeroOptimization(const rt::TrainConfig& c) {
  nlohmann::json z = {{"stage", rt::stageNumber(c.zero)}};
  if (!rt::shardsOptimizer(c.zero)) return z;
  z["reduce_bucket_size"] = int64_t(models::zero::kReduceBucketElements);
  z["allgather_bucket_size"] = int64_t(models::zero::kAllgatherBucketElements);
  z["overlap_comm"] = true;
  z["contiguous_gradients"] = c.zero >= rt::ZeroStage::Gradients;
  if (c.zero == rt::ZeroStage::Parameters) {
    z["stage3_prefetch_bucket_size"] = int64_t(models::zero::kPrefetchElements);
    z["stage3_param_persistence_threshold"] = int64_t(models::zero::kParamPersistenceElements);
    z["stage3_max_live_parameters"] = int64_t(models::zero::kMaxLiveParameters);
    // Hybrid sharding was DeepSpeed's MiCS (mics_shard_size), which DeepSpeed 0.19.8's config refuses
    // ("MiCS ZeRO-3 sharding has been removed"): stage 3 over every rank, and a note (deepspeedNotes).
  }
  return z;
}

// DeepSpeed-MoE is configured in the model code, not in ds_config.json: each MoE MLP is a
// deepspeed.moe.layer.MoE (deepspeed/moe/layer.py) with the workload's experts and routing.
std::string deepspeedMoeNote(const rt::TrainConfig& c) {
  const workloads::Workload& w = c.model;
  std::ostringstream o;
  std::string layers;
  if (w.moe_pattern.empty()) {
    layers = "l with l % " + std::to_string(w.moe_every) + " == 0";
  } else {
    for (int64_t l = 0; l < w.n_layer; ++l)
      if (w.moeLayer(l)) layers += (layers.empty() ? "" : ", ") + std::to_string(l);
    layers = "in " + layers + " (the others a dense MLP of " + std::to_string(w.ffnHidden()) + ")";
  }
  o << "DeepSpeed's MoE is set in the model code, not in this JSON: the MLP of each layer " << layers
    << " as deepspeed.moe.layer.MoE(hidden_size=" << w.n_embd
    << ", expert=<a " << w.n_embd << "->" << w.expertHidden() << "->" << w.n_embd << " "
    << (w.mlp == workloads::Mlp::SwiGLU ? "SwiGLU" : "GELU") << " MLP" << (w.mlp_bias ? "" : " without biases")
    << ">, num_experts="
    << w.n_experts << ", ep_size=" << c.ep << ", k=" << w.top_k << ", capacity_factor="
    << (w.capacity_factor > 0 ? w.capacity_factor : 1.0) << ", eval_capacity_factor="
    << (w.capacity_factor > 0 ? w.capacity_factor : 1.0) << ", min_capacity=0, drop_tokens=" << (w.capacity_factor > 0 ? "True" : "False")
    << ", use_residual=" << (w.shared_expert ? "True" : "False") << "), adding its l_aux times " << w.aux_loss_coeff
    << " to the loss";
  if (w.z_loss_coeff > 0) o << "; DeepSpeed's gate has no router z-loss (z_loss_coeff " << w.z_loss_coeff << " is not kept)";
  if (w.shared_expert) o << "; use_residual is DeepSpeed's Residual-MoE: a dense MLP mixed by a learned coefficient, not added as the shared expert is";
  if (w.top_k > 2) o << "; DeepSpeed's gates are top-1 and top-2 only: k=" << w.top_k << " does not map";
  // DeepSpeed's ZeRO shards each expert's state over its expert-data-parallel group once the expert
  // parameters sit in their own optimizer groups (deepspeed/moe/utils.py).
  if (c.ep > 1)
    o << "; with ep_size=" << c.ep << " pass the optimizer split_params_into_different_moe_groups_for_optimizer(model) "
      << "(deepspeed.moe.utils), and ZeRO then shards the experts' state over their " << c.dp / c.ep
      << " expert-data-parallel rank(s), where this runtime keeps it whole";
  return o.str();
}

}  // namespace

std::string deepspeedReduceDtype(const rt::TrainConfig& c, const ExportTarget& t) {
  if (t.reduce_dtype == "fp32" || t.reduce_dtype == "bf16" || t.reduce_dtype == "fp16") return t.reduce_dtype;
  if (t.reduce_dtype != "default")
    throw UserError("--reduce-dtype", "must be default, fp32, bf16 or fp16, not \"" + t.reduce_dtype + "\"",
                    "default writes the model's dtype, as DeepSpeed reduces when the key is absent");
  // DeepSpeedEngine.communication_data_type (deepspeed 0.19.8 runtime/engine.py) without the key:
  // fp16 if enabled, else bf16 if enabled, else fp32. An fp8 export trains in bf16.
  if (c.precision == rt::Precision::FP16) return "fp16";
  if (c.precision == rt::Precision::BF16 || c.precision == rt::Precision::FP8) return "bf16";
  return "fp32";
}

namespace {

// DeepSpeed's config JSON. The schedule is WarmupCosineLR (lr_schedules.py): the ratio rises
// linearly from warmup_min_ratio 0 over warmup_num_steps, then follows a cosine to cos_min_ratio at
// total_num_steps, times the optimizer's lr — this runtime's schedule, except that its warm-up
// starts at lr/warmup rather than 0. DeepSpeed refuses warmup_num_steps 0, so no warm-up is 1 step.
ExportResult deepspeed(const rt::TrainConfig& c, const ExportTarget& t) {
  ExportResult r;
  nlohmann::json j = {
      {"train_batch_size", c.global_batch},
      {"train_micro_batch_size_per_gpu", c.mbs},
      {"gradient_accumulation_steps", c.ga_steps},
      {"gradient_clipping", c.clip},
      {"bf16", {{"enabled", c.precision == rt::Precision::BF16 || c.precision == rt::Precision::FP8}}},
      {"fp16",
       {{"enabled", c.precision == rt::Precision::FP16},
        {"initial_scale_power", int(std::lround(std::log2(c.fp16_init_scale)))},
        {"loss_scale_window", c.fp16_growth_interval}}},
      {"zero_optimization", zeroOptimization(c)},
      // The dtype gradients are reduced in, said rather than left to DeepSpeed's default, so that
      // `predict --deepspeed-config` of this file prices what the note's DeepSpeed prediction did.
      {"communication_data_type", deepspeedReduceDtype(c, t)},
      {"activation_checkpointing", {{"partition_activations", false}, {"contiguous_memory_optimization", false}}},
      {"steps_per_print", 10}};
  const char* type = c.optimizer == rt::OptimizerKind::SGD ? "SGD" : "AdamW";
  if (c.optimizer == rt::OptimizerKind::Adafactor || c.optimizer == rt::OptimizerKind::Adam8bit)
    r.notes.push_back(std::string("DeepSpeed's config has no ") +
                      (c.optimizer == rt::OptimizerKind::Adafactor ? "Adafactor" : "8-bit Adam") +
                      ": this file runs AdamW (fp32 moments, 8 bytes a parameter), which predict --framework "
                      "deepspeed --deepspeed-config prices with --optimizer adamw");
  j["optimizer"] = {{"type", type}, {"params", {{"lr", c.lr}, {"weight_decay", c.weight_decay}}}};
  if (c.optimizer != rt::OptimizerKind::SGD) {
    j["optimizer"]["params"]["betas"] = {c.beta1, c.beta2};
    j["optimizer"]["params"]["eps"] = c.eps;
    // DeepSpeed's Adam is a compiled op (FusedAdam, CPUAdam) that the CPU accelerator builds with a
    // compiler at start; torch's AdamW needs none (CPU Gloo ranks run from the PyPI wheel as it is).
    if (t.cpu) j["optimizer"]["params"]["torch_adam"] = true;
  }
  j["scheduler"] = {{"type", "WarmupCosineLR"},
                    {"params",
                     {{"total_num_steps", c.steps},
                      {"warmup_num_steps", std::max<int64_t>(1, c.warmup)},
                      {"warmup_min_ratio", 0.0},
                      {"warmup_type", "linear"},
                      {"cos_min_ratio", c.min_lr_ratio}}}};
  if (c.pp > 1) j["pipeline"] = {{"stages", c.pp}};
  r.text = jsonText(j, 2) + "\n";
  if (c.virtual_stages > 1)
    r.notes.push_back("DeepSpeed's pipeline engine has no interleaved schedule: virtual_stages=" +
                      std::to_string(c.virtual_stages) + " is not in this config (it runs 1F1B on " +
                      std::to_string(c.pp) + " stages)");
  if (c.cp > 1)
    r.notes.push_back("DeepSpeed has no ring context parallelism (its Ulysses sequence parallelism splits the heads "
                      "with all-to-alls instead): cp=" + std::to_string(c.cp) + " is not in this config");
  if (c.pp > 1 && c.zero >= rt::ZeroStage::Gradients)
    r.notes.push_back("DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3 (it shards gradients per micro-batch "
                      "only without PP): use stage 1 with pp=" + std::to_string(c.pp));
  if (c.tp > 1)
    r.notes.push_back("DeepSpeed's config has no tensor parallelism: tp=" + std::to_string(c.tp) +
                      " needs Megatron-DeepSpeed");
  if (c.ckpt != rt::Checkpointing::None)
    r.notes.push_back(std::string("checkpointing (") + toString(c.ckpt) +
                      ") is set in the model code: deepspeed.checkpointing.checkpoint");
  if (hybridShard(c))
    r.notes.push_back("DeepSpeed has no hybrid ZeRO-3 (MiCS, mics_shard_size, was removed): this config shards over all " +
                      std::to_string(c.dp) + " ranks, not groups of --zero-shard-size " +
                      std::to_string(c.zero_shard_size) + " (ZeRO++'s zero_hpz_partition_size keeps only a second "
                      "copy of the parameters within a group)");
  if (c.model.isMoe()) r.notes.push_back(deepspeedMoeNote(c));
  if (c.precision == rt::Precision::FP8)
    r.notes.push_back("DeepSpeed's config has no FP8: it says bf16; the FP8 linears come from the model's code "
                      "(Transformer Engine's te.Linear under te.fp8_autocast with DelayedScaling(fp8_format=HYBRID, "
                      "amax_history_len=16, amax_compute_algo=\"max\"))");
  return r;
}

}  // namespace

// PyTorch FSDP's sharding strategy for a ZeRO stage (nullptr: none, plain DDP or DeepSpeed's ZeRO-1):
// ZeRO-2 shards gradients and optimizer state (SHARD_GRAD_OP), ZeRO-3 the parameters too
// (FULL_SHARD); ZeRO-3 with --zero-shard-size N < dp is HYBRID_SHARD (FULL_SHARD within a group,
// replicated across; FSDP's group is one node, so N must be the node's GPUs: accelerateNotes says so).
// _HYBRID_SHARD_ZERO2 would be hybrid ZeRO-2, which the runtime does not run.
const char* detail::fsdpStrategy(const rt::TrainConfig& c) {
  if (c.zero == rt::ZeroStage::Gradients) return "SHARD_GRAD_OP";
  if (c.zero == rt::ZeroStage::Parameters) return hybridShard(c) ? "HYBRID_SHARD" : "FULL_SHARD";
  return nullptr;
}

namespace {
using detail::fsdpStrategy;

// The layer FSDP wraps as a unit (its auto-wrap policy): the Transformers block of the model's
// config.json (GPT2Block, LlamaDecoderLayer, ...), whose layer this runtime's block matches.
// Accelerate's fsdp_config, as `accelerate config` writes it for FSDP 1: the block class wrapped,
// the next layer's all-gather issued before the current backward (BACKWARD_PRE, what the models'
// prefetch assumes), no CPU offload, module states synchronised from rank 0.
nlohmann::ordered_json fsdpConfig(const rt::TrainConfig& c) {
  return {{"fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP"},
          {"fsdp_backward_prefetch", "BACKWARD_PRE"},
          {"fsdp_cpu_ram_efficient_loading", true},
          {"fsdp_forward_prefetch", false},
          {"fsdp_offload_params", false},
          {"fsdp_sharding_strategy", fsdpStrategy(c)},
          {"fsdp_state_dict_type", "SHARDED_STATE_DICT"},
          {"fsdp_sync_module_states", true},
          {"fsdp_transformer_layer_cls_to_wrap", detail::wrapClass(c)},
          {"fsdp_use_orig_params", true},
          {"fsdp_version", 1}};
}

// Accelerate's ClusterConfig, as `accelerate config` writes it (key: value, sorted). "NO" and "no"
// are quoted: YAML 1.1 (PyYAML, which Accelerate uses) reads them bare as the boolean false.
// The nodes a candidate's ranks fill: Accelerate starts num_processes / num_machines processes on each
// (accelerate/utils/launch.py). One on a CPU cluster, or when the study's cluster is not known here.
int64_t accelerateMachines(const rt::TrainConfig& c, const ExportTarget& t) {
  if (t.cpu || t.devices_per_node <= 0) return 1;
  return std::max<int64_t>(1, (c.dp + t.devices_per_node - 1) / t.devices_per_node);
}

nlohmann::ordered_json accelerateFields(const rt::TrainConfig& c, const ExportTarget& t) {
  const std::string distributed = c.dp > 1 ? (fsdpStrategy(c) ? "FSDP" : t.cpu ? "MULTI_CPU" : "MULTI_GPU") : "NO";
  const std::string precision = c.precision == rt::Precision::FP32 ? "no" : toString(c.precision);  // fp8 too
  nlohmann::ordered_json j = {{"compute_environment", "LOCAL_MACHINE"}, {"debug", false},
                              {"distributed_type", distributed}};
  // fp8: Accelerate's Transformer Engine backend with this runtime's recipe (runtime/src/model/fp8.h).
  if (c.precision == rt::Precision::FP8)
    j["fp8_config"] = nlohmann::ordered_json{{"amax_compute_algo", "max"}, {"amax_history_len", 16}, {"backend", "TE"},
                                             {"fp8_format", "HYBRID"}, {"margin", 0}};
  if (distributed == "FSDP") {
    j["fsdp_config"] = fsdpConfig(c);
    // Accelerate's FSDP plugin refuses sync_module_states without an accelerator ("no available
    // devices found"): CPU ranks start from the same seed instead. accelerate launch refuses
    // cpu_ram_efficient_loading without sync_module_states ("set --fsdp_sync_module_states to True"):
    // both off on the CPU (the FSDP trial of --runner accelerate exited 1 on it).
    if (t.cpu) {
      j["fsdp_config"]["fsdp_sync_module_states"] = false;
      j["fsdp_config"]["fsdp_cpu_ram_efficient_loading"] = false;
    }
  }
  j.update(nlohmann::ordered_json{{"machine_rank", 0},
          {"main_training_function", "main"},
          {"mixed_precision", precision},
          {"num_machines", accelerateMachines(c, t)},
          {"num_processes", c.dp},
          {"rdzv_backend", "static"},
          {"same_network", true},
          {"use_cpu", t.cpu}});
  return j;
}

std::string yamlValue(const nlohmann::ordered_json& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    return s == "NO" || s == "no" ? "'" + s + "'" : s;
  }
  return jsonText(v);  // numbers and booleans read the same in YAML
}

std::string accelerateYaml(const rt::TrainConfig& c, const ExportTarget& t) {
  const nlohmann::ordered_json fields = accelerateFields(c, t);  // items() refers to it: kept alive
  std::string out;
  for (const auto& [key, value] : fields.items()) {
    if (!value.is_object()) {
      out += key + ": " + yamlValue(value) + "\n";
      continue;
    }
    out += key + ":\n";  // a nested mapping (fsdp_config), indented as `accelerate config` writes it
    for (const auto& [k, v] : value.items()) out += "  " + k + ": " + yamlValue(v) + "\n";
  }
  return out;
}

// Transformers' TrainingArguments. The cosine decays to min_lr_rate × lr as this runtime's does
// ("cosine" alone would decay to 0). output_dir is a placeholder to edit. use_cpu is the study's
// cluster, as in the Accelerate config: TrainingArguments refuses bf16 without a GPU unless use_cpu
// (it reads use_cpu for that, not accelerate launch's ACCELERATE_USE_CPU).
nlohmann::ordered_json trainingArguments(const rt::TrainConfig& c, const ExportTarget& t) {
  const char* optim = c.optimizer == rt::OptimizerKind::Adafactor  ? "adafactor"
                      : c.optimizer == rt::OptimizerKind::Adam8bit ? "adamw_bnb_8bit"
                      : c.optimizer == rt::OptimizerKind::SGD      ? "sgd"
                                                                   : "adamw_torch";
  nlohmann::ordered_json j = {{"output_dir", "trainscope-run"},
          {"per_device_train_batch_size", c.mbs},
          {"gradient_accumulation_steps", c.ga_steps},
          {"gradient_checkpointing", c.ckpt != rt::Checkpointing::None},
          {"bf16", c.precision == rt::Precision::BF16 || c.precision == rt::Precision::FP8},
          {"fp16", c.precision == rt::Precision::FP16},
          {"use_cpu", t.cpu},
          {"optim", optim},
          {"learning_rate", c.lr},
          {"weight_decay", c.weight_decay},
          {"adam_beta1", c.beta1},
          {"adam_beta2", c.beta2},
          {"adam_epsilon", c.eps},
          {"max_grad_norm", c.clip},
          {"lr_scheduler_type", "cosine_with_min_lr"},
          {"lr_scheduler_kwargs", {{"min_lr_rate", c.min_lr_ratio}}},
          {"warmup_steps", c.warmup},
          {"max_steps", c.steps},
          {"seed", c.seed}};
  if (c.dp > 1 && fsdpStrategy(c)) {
    // TrainingArguments' FSDP as Transformers 5 reads it: fsdp true, the rest in fsdp_config (its
    // string form, "full_shard auto_wrap", is deprecated). FSDP 1, as the Accelerate config: its
    // reshard_after_forward is the sharding strategy's name.
    std::string strategy = fsdpStrategy(c);
    std::transform(strategy.begin(), strategy.end(), strategy.begin(), [](unsigned char ch) { return std::tolower(ch); });
    j["fsdp"] = true;
    j["fsdp_config"] = {{"version", 1},
                        {"reshard_after_forward", strategy},
                        {"auto_wrap_policy", "TRANSFORMER_BASED_WRAP"},
                        {"transformer_layer_cls_to_wrap", {detail::wrapClass(c)}},
                        {"backward_prefetch", "backward_pre"},
                        {"forward_prefetch", false},
                        {"use_orig_params", true},
                        {"sync_module_states", !t.cpu}};  // refused without an accelerator (above)
  }
  return j;
}

// accelerate launch starts MULTI_CPU processes only through mpirun (an mpirun_hostfile); without one
// it runs a single process. torchrun starts them, each `accelerate launch` on the same port.
std::vector<std::string> accelerateNotes(const rt::TrainConfig& c, const ExportTarget& t) {
  std::vector<std::string> notes;
  if (c.tp > 1 || c.pp > 1 || c.cp > 1)
    notes.push_back("Accelerate runs data parallelism only: tp/pp/cp are not in this export");
  if (c.model.isMoe())
    notes.push_back("the mixture of experts (" + std::to_string(c.model.n_experts) + " experts, top-" +
                    std::to_string(c.model.top_k) + ") is the model's own: Accelerate and TrainingArguments have "
                    "no MoE settings; a Transformers model sets it in its config (e.g. MixtralConfig's "
                    "num_local_experts, num_experts_per_tok, router_aux_loss_coef) and the experts run data-parallel");
  if (c.precision == rt::Precision::FP8)
    notes.push_back("fp8 is Accelerate's mixed_precision fp8 with fp8_config (Transformer Engine, HYBRID, amax history "
                    "16, max); TrainingArguments has no FP8 field and says bf16: launch it through this Accelerate "
                    "config");
  if (c.zero == rt::ZeroStage::OptimizerStates && c.dp > 1)
    notes.push_back("ZeRO-1 is DeepSpeed's in Accelerate: use --format deepspeed as its deepspeed_config_file");
  if (c.zero >= rt::ZeroStage::Gradients && c.dp > 1)
    notes.push_back(std::string("ZeRO-") + std::to_string(rt::stageNumber(c.zero)) + " as PyTorch FSDP's " +
                    fsdpStrategy(c) + " (fsdp_version 1, each " + detail::wrapClass(c) + " wrapped: the class of your model's "
                    "transformer block)");
  if (hybridShard(c))
    notes.push_back("HYBRID_SHARD shards within one node and replicates across nodes: it matches --zero-shard-size " +
                    std::to_string(c.zero_shard_size) + " when each node runs " + std::to_string(c.zero_shard_size) +
                    " processes; otherwise pass FSDP a 2-D device_mesh (replicas " +
                    std::to_string(c.dp / c.zero_shard_size) + " x shard " + std::to_string(c.zero_shard_size) + ")");
  if (const int64_t machines = accelerateMachines(c, t); machines > 1) {
    notes.push_back("num_machines " + std::to_string(machines) + " (" + std::to_string(c.dp) + " processes, " +
                    std::to_string(c.dp / machines) + " a node): run accelerate launch with this file on every node, "
                    "each with its own --machine_rank (this file's 0 is the main node's) and --main_process_ip of node 0");
    if (c.dp % machines != 0)
      notes.push_back(std::to_string(c.dp) + " processes do not divide over " + std::to_string(machines) +
                      " nodes: accelerate launch starts num_processes / num_machines = " + std::to_string(c.dp / machines) +
                      " on each, " + std::to_string(c.dp / machines * machines) + " in all; launch with torchrun per node instead");
  }
  else if (!t.cpu && t.devices_per_node <= 0 && c.dp > 8)  // more than the usual node holds
    notes.push_back("num_machines 1: the study's cluster is not known here, so the nodes its " + std::to_string(c.dp) +
                    " processes fill are not either; set num_machines to them");
  if (t.cpu && c.dp > 1 && !fsdpStrategy(c))  // an FSDP config's processes accelerate launch starts itself
    notes.push_back("accelerate launch starts MULTI_CPU processes only through mpirun; on one machine: torchrun "
                    "--nproc_per_node " +
                    std::to_string(c.dp) +
                    " --master_port P -m accelerate.commands.launch --config_file FILE --main_process_port P "
                    "SCRIPT");
  return notes;
}

}  // namespace

const char* exportFormatNames() {
  return "run|command|megatron|deepspeed|accelerate|accelerate-config|training-args|hf-config|torchtitan";
}

ExportFormat parseExportFormat(const std::string& name, const std::string& field) {
  for (const auto& f : kFormats)
    if (name == f.name) return f.format;
  throw UserError(field, "unknown value \"" + name + "\"", std::string("use one of ") + exportFormatNames());
}

runconfig::TrainConfig trainingRunOf(runconfig::TrainConfig c) {
  c.steps = 1000;
  c.warmup = 20;
  c.min_lr_ratio = runconfig::TrainConfig{}.min_lr_ratio;
  c.inject_failure.clear();
  // An export is for the machines its study was for (a cluster's nodes), not this one: this host's
  // cores bound neither its ranks nor its threads (runconfig's checkHost, which oversubscribe passes).
  const bool oversubscribe = c.oversubscribe;
  c.oversubscribe = true;
  runconfig::resolve(c);
  c.oversubscribe = oversubscribe;
  return c;
}

ExportResult exportConfig(const runconfig::TrainConfig& c, ExportFormat format, const ExportTarget& target) {
  switch (format) {
    case ExportFormat::Run:
      return {runJson(c), {}};
    case ExportFormat::Command:
      return {commandLines(c), {}};
    case ExportFormat::Megatron:
      return megatron(c);
    case ExportFormat::HfConfig:
      return {workloads::hfConfigJson(c.model, "--format"), {}, {}};
    case ExportFormat::Torchtitan:
      return torchtitanFlags(c);
    default:
      break;
  }
  // The formats that train a Transformers / DeepSpeed model: its config.json goes beside them.
  ExportResult r;
  switch (format) {
    case ExportFormat::DeepSpeed:
      r = deepspeed(c, target);
      break;
    case ExportFormat::AccelerateConfig:
      r = {accelerateYaml(c, target), accelerateNotes(c, target), {}};
      break;
    case ExportFormat::TrainingArgs:
      r = {jsonText(trainingArguments(c, target), 2) + "\n", accelerateNotes(c, target), {}};
      break;
    case ExportFormat::Accelerate: {
      const nlohmann::ordered_json j = {{"accelerate_config", accelerateFields(c, target)},
                                        {"training_arguments", trainingArguments(c, target)}};
      r = {jsonText(j, 2) + "\n", accelerateNotes(c, target), {}};
      break;
    }
    default:
      throw std::logic_error("exportConfig: unknown format");
  }
  detail::addModelConfig(c, r);
  return r;
}

}  // namespace trainscope::tuner
