// hf_weights.cpp — see hf_weights.h.
#include "state/hf_weights.h"

#include <ATen/ATen.h>

#include "trainscope/common/error.h"
#include "trainscope/workloads/hf_checkpoint.h"
#include "trainscope/workloads/memory.h"

namespace trainscope::runtime {
namespace {

std::string shapeText(const std::vector<int64_t>& s) {
  std::string t = "(";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + ")";
}

// Dim 0 of the whole tensor `t` as its unpadded shape has it (the embedding and head may carry
// vocabulary padding rows).
at::Tensor unpadded(const at::Tensor& t, const std::vector<int64_t>& shape) {
  return t.dim() >= 1 && !shape.empty() && t.size(0) > shape[0] ? t.narrow(0, 0, shape[0]) : t;
}

at::ScalarType dtypeOf(const std::string& d) {
  if (d == "F32") return at::kFloat;
  if (d == "BF16") return at::kBFloat16;
  if (d == "F16") return at::kHalf;
  if (d == "F64") return at::kDouble;
  return at::kByte;  // refused by the caller
}

// p.name in the checkpoint, else without the base model's prefix ("transformer." for gpt2, "model."
// for the llama family): the Hub's older checkpoints (openai-community/gpt2's model.safetensors:
// "wte.weight", "h.0.attn.c_attn.weight" …) were saved from the base model, and transformers loads
// them by adding the prefix, as this does.
std::map<std::string, safetensors::Tensor>::const_iterator findHf(const std::map<std::string, safetensors::Tensor>& hf,
                                                                 const std::string& name) {
  const auto it = hf.find(name);
  if (it != hf.end()) return it;
  for (const char* prefix : {"transformer.", "model."})
    if (name.rfind(prefix, 0) == 0) {
      const auto bare = hf.find(name.substr(std::string(prefix).size()));
      if (bare != hf.end()) return bare;
    }
  return hf.end();
}

}  // namespace

std::vector<std::string> flatNames(const workloads::Workload& w) {
  std::vector<std::string> names;
  for (const ParamInfo& p : GptWeights::info(StageSpec::whole(w.n_layer).withModel(w))) names.push_back(p.name);
  return names;
}

namespace {
std::map<std::string, std::vector<int64_t>> shapesByName(const workloads::Workload& w) {
  std::map<std::string, std::vector<int64_t>> m;
  for (const workloads::ParamTensor& t : workloads::parameterTensors(w)) m[t.name] = t.shape;
  return m;
}
const std::vector<int64_t>& shapeOf(const std::map<std::string, std::vector<int64_t>>& m, const std::string& name) {
  const auto it = m.find(name);
  if (it == m.end()) TRAINSCOPE_THROW("checkpoint: the model has no tensor " + name);
  return it->second;
}
}  // namespace

std::vector<std::pair<std::string, int64_t>> hfNames(const workloads::Workload& w, const std::vector<std::string>& flat) {
  const auto shapes = shapesByName(w);
  std::vector<std::pair<std::string, int64_t>> out;
  for (const std::string& n : flat) {
    const std::vector<int64_t>& s = shapeOf(shapes, n);
    for (const workloads::HfPiece& p : workloads::hfPieces(w, n, s)) {
      int64_t numel = 1;
      for (size_t d = 0; d < s.size(); ++d) numel *= s[d];
      if (p.expert >= 0) numel /= s[0];
      if (p.rows >= 0) numel = numel / (p.expert >= 0 ? s[1] : s[0]) * p.rows;
      out.emplace_back(p.name, 4 * numel);
    }
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> toHf(const workloads::Workload& w,
                                                     const std::vector<std::pair<std::string, at::Tensor>>& flat) {
  const auto shapes = shapesByName(w);
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, tensor] : flat) {
    const std::vector<int64_t>& shape = shapeOf(shapes, name);
    const at::Tensor t = unpadded(tensor.detach().to(at::kCPU, at::kFloat), shape);
    for (const workloads::HfPiece& p : workloads::hfPieces(w, name, shape)) {
      at::Tensor x = p.expert >= 0 ? t.select(0, p.expert) : t;
      if (p.rows >= 0) x = x.narrow(0, p.row_begin, p.rows);
      if (p.transpose) x = x.t();
      out.emplace_back(p.name, x.contiguous());
    }
  }
  return out;
}

GptWeights fromHf(const workloads::Workload& w, const std::map<std::string, safetensors::Tensor>& hf,
                  const std::string& dir, const std::string& field) {
  const std::vector<workloads::ParamTensor> shapes = workloads::parameterTensors(w);
  const std::vector<std::string> names = flatNames(w);
  const std::string fix = "pass a checkpoint of workload " + w.name + " (or --workload " + dir + "/config.json)";
  std::vector<at::Tensor> flat;
  for (size_t i = 0; i < names.size(); ++i) {
    at::Tensor t = at::zeros(shapes[i].shape, at::kFloat);
    for (const workloads::HfPiece& p : workloads::hfPieces(w, names[i], shapes[i].shape)) {
      at::Tensor dst = p.expert >= 0 ? t.select(0, p.expert) : t;
      if (p.rows >= 0) dst = dst.narrow(0, p.row_begin, p.rows);
      if (p.transpose) dst = dst.t();
      const auto it = findHf(hf, p.name);
      if (it == hf.end())
        throw UserError(field, dir + " holds no tensor " + p.name + " (a checkpoint of another model?)", fix);
      const safetensors::Tensor& s = it->second;
      if (s.shape != dst.sizes().vec())
        throw UserError(field, dir + ": tensor " + p.name + " is " + shapeText(s.shape) + ", but workload " + w.name +
                                   " needs " + shapeText(dst.sizes().vec()), fix);
      const at::ScalarType dt = dtypeOf(s.dtype);
      if (dt == at::kByte)
        throw UserError(field, dir + ": tensor " + p.name + " is " + s.dtype + ", not a floating-point type",
                        "pass a checkpoint of F32, BF16 or F16 weights");
      std::vector<char> bytes = s.bytes;  // from_blob needs a writable pointer; copied below anyway
      const at::Tensor src = at::from_blob(bytes.data(), s.shape, at::TensorOptions().dtype(dt));
      dst.copy_(src.to(at::kFloat));
    }
    flat.push_back(t);
  }
  return GptWeights::fromFlat(flat, StageSpec::whole(w.n_layer).withModel(w));
}

}  // namespace trainscope::runtime
