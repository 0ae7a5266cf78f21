// stage_params.cpp — the parameters a stage's TP rank holds, tensor by tensor, in the runtime's
// layout: what the time model's gradient reductions, ZeRO's gathers and the optimizer's passes move.
#include "gpu_time.h"

#include "trainscope/models/dp_layout.h"
#include "trainscope/models/moe.h"

namespace trainscope::models::gpu {

namespace {

// One layer's tensors on a TP rank, in the runtime's layout (dp_layout.h's stageSlots): the norms
// (LayerNorm: weight, bias; RMSNorm: weight), qkv (NH·HS + 2·KV·HS)/t·h (GQA's K/V split or
// replicated) and its bias, projection, the MLP's fc1 (SwiGLU: [gate; up], 2F/t rows) and fc2 with
// their biases — a zero for a tensor the architecture lacks. The last four are the MLP's.
std::vector<double> layerTensors(const workloads::Workload& w, const Plan& p) {
  const double h = double(w.n_embd), t = double(p.tp), ln = w.norm == workloads::Norm::LayerNorm ? h : 0.0;
  const double q = double(w.n_head * w.headSize()) / t, kv = double(kvHeadsPerRank(w, p.tp) * w.headSize());
  const double F = double(w.ffnHidden()) / t, F2 = w.mlp == workloads::Mlp::SwiGLU ? 2.0 * F : F;
  return {h, ln, (q + 2.0 * kv) * h, w.qkv_bias ? q + 2.0 * kv : 0.0, h * q, w.proj_bias ? h : 0.0, h, ln,
          F2 * h, w.mlp_bias ? F2 : 0.0, h * F, w.mlp_bias ? h : 0.0};
}

}  // namespace

double layerParams(const workloads::Workload& w, const Plan& p) {
  double n = 0;
  for (const double x : layerTensors(w, p)) n += x;
  return n;
}

std::vector<double> stageTensors(const workloads::Workload& w, const Plan& p, int64_t s) {
  const double h = double(w.n_embd);
  const double word = double((w.vocab_size + p.tp - 1) / p.tp) * h;  // V/t rows of the padded vocabulary
  std::vector<double> n;
  if (s == 0) n = {word, w.positions == workloads::Positions::Learned ? double(w.n_positions) * h : 0.0};
  const std::vector<double> layer = layerTensors(w, p);
  // A MoE layer's MLP is the router, this rank's E/ep experts and the shared expert, in place of
  // fc1 and fc2 (the last 4 tensors of a dense layer); which layers they are does not matter to sums.
  std::vector<double> moe(layer.begin(), layer.end() - 4);
  for (const auto& shape : moeMlpShapes(w, p)) {
    double x = 1;
    for (const int64_t d : shape) x *= double(d);
    moe.push_back(x);
  }
  const int64_t moes = moeLayersOfStage(w, p, s);
  for (int64_t l = 0; l < layersOfStage(w.n_layer, p.pp, s); ++l) {
    const std::vector<double>& x = l < moes ? moe : layer;
    n.insert(n.end(), x.begin(), x.end());
  }
  if (s == p.pp - 1) {
    n.insert(n.end(), {h, w.norm == workloads::Norm::LayerNorm ? h : 0.0});  // the final norm
    if (p.pp > 1 || !w.tie_embeddings) n.push_back(word);  // the tied copy of the word embedding, or lm_head
  }
  return n;
}


double stageParams(const workloads::Workload& w, const Plan& p, int64_t s) {
  double n = 0;
  for (const double x : stageTensors(w, p, s)) n += x;
  return n;
}

}  // namespace trainscope::models::gpu
