// fp8_state.cpp — see fp8_state.h.
#include "state/fp8_state.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "model/fp8.h"
#include "state/hf_weights.h"
#include "trainscope/common/error.h"
#include "trainscope/common/safetensors.h"
#include "trainscope/runtime/comm.h"

namespace trainscope::runtime {
namespace {

std::string fileName(int stage, int pp) {
  if (pp == 1) return "fp8-scales.safetensors";
  char b[64];
  std::snprintf(b, sizeof(b), "fp8-scales-%05d-of-%05d.safetensors", stage + 1, pp);
  return b;
}

// The Hugging Face names of one runtime tensor (several for a fused one).
std::vector<std::string> hfNamesOf(const workloads::Workload& w, const std::string& flat) {
  std::vector<std::string> out;
  for (const auto& [name, bytes] : hfNames(w, {flat})) out.push_back(name);
  return out;
}

}  // namespace

nlohmann::json saveFp8State(const std::string& tmp, const TrainConfig& cfg, const Trainer& trainer, Comm& comm) {
  if (cfg.precision != Precision::FP8) return nullptr;
  const Layout& l = comm.layout();
  if (l.tp_rank == 0 && l.dp_rank == 0 && l.cp_rank == 0) {
    std::vector<std::vector<double>> keep;  // [scale, history…] per role and name
    std::vector<safetensors::TensorView> views;
    const std::vector<fp8::Meta*>& metas = trainer.fp8Recipe().metas();
    for (const fp8::Meta* m : metas)
      for (int r = 0; r < 3; ++r) {
        std::vector<double> v{m->scale[r]};
        v.insert(v.end(), m->history[r].begin(), m->history[r].end());
        keep.push_back(std::move(v));
      }
    size_t k = 0;
    for (const fp8::Meta* m : metas) {
      const std::vector<std::string> names = hfNamesOf(cfg.model, m->name);
      for (int r = 0; r < 3; ++r, ++k)
        for (const std::string& name : names)
          views.push_back({std::string(fp8::roleName(r)) + "/" + name, "F64", {int64_t(keep[k].size())}, keep[k].data(),
                           int64_t(keep[k].size() * sizeof(double))});
    }
    safetensors::writeFile(tmp + "/trainscope/" + fileName(l.pp_rank, l.pp), views,
                           {{"format", "pt"}, {"history", std::to_string(fp8::kHistory)}}, "--save");
  }
  nlohmann::json files = nlohmann::json::array();
  for (int s = 0; s < l.pp; ++s) files.push_back(fileName(s, l.pp));
  return {{"files", files}, {"history", fp8::kHistory}};
}

void loadFp8State(const std::string& dir, const nlohmann::json& rec, const TrainConfig& cfg, Trainer& trainer,
                  const std::string& field) {
  std::map<std::string, safetensors::Tensor> all;
  for (const auto& f : rec.at("files")) {
    std::map<std::string, safetensors::Tensor> m = safetensors::readFile(dir + "/trainscope/" + f.get<std::string>(), field);
    all.insert(std::make_move_iterator(m.begin()), std::make_move_iterator(m.end()));
  }
  for (fp8::Meta* m : trainer.fp8Recipe().metas()) {
    const std::vector<std::string> names = hfNamesOf(cfg.model, m->name);
    for (int r = 0; r < 3; ++r) {
      const safetensors::Tensor* t = nullptr;
      for (const std::string& name : names) {
        auto it = all.find(std::string(fp8::roleName(r)) + "/" + name);
        if (it != all.end()) {
          t = &it->second;
          break;
        }
      }
      if (!t || t->dtype != "F64" || t->shape.size() != 1 || t->shape[0] < 1 ||
          int64_t(t->bytes.size()) != t->shape[0] * int64_t(sizeof(double)))
        throw UserError(field, dir + "/trainscope holds no fp8 " + fp8::roleName(r) + " scale for " +
                                   (names.empty() ? m->name : names.front()) + " (the checkpoint is damaged or of another model)",
                        "resume from another checkpoint, or --init-from " + dir + " for its weights alone");
      std::vector<double> v(size_t(t->shape[0]));
      std::memcpy(v.data(), t->bytes.data(), t->bytes.size());
      m->scale[r] = v[0];
      // The newest kHistory amaxes (a longer history saved by a build with another kHistory).
      const size_t from = std::max<size_t>(1, v.size() > size_t(fp8::kHistory) ? v.size() - size_t(fp8::kHistory) : 1);
      m->history[r].assign(v.begin() + std::ptrdiff_t(from), v.end());
    }
  }
}

}  // namespace trainscope::runtime
