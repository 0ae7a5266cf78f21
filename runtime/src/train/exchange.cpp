// exchange.cpp — what ranks hand each other: the step all-gather's named slots, the clock pings,
// and gatherOnLeader through the rendezvous store with the rows' named JSON forms.
#include "train/exchange.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <array>

#include "trainscope/common/clock.h"
#include "trainscope/common/json_text.h"

namespace trainscope::runtime {

namespace {

using StepSlots = std::array<int64_t, kStepSlots>;

StepSlots packStep(const rundb::Step& r, int64_t stop_request) {
  StepSlots v{};
  v[kPeakBytes] = r.peak_bytes;
  v[kParamBytes] = r.param_bytes;
  v[kGradBytes] = r.grad_bytes;
  v[kOptimBytes] = r.optim_bytes;
  v[kActivationBytes] = r.activation_bytes;
  v[kStepTimeNs] = r.step_time_ns;
  v[kStartNs] = r.start_ns;
  v[kStopRequest] = stop_request;
  return v;
}

// One rank's slots `v` (kStepSlots values) into a copy of `mine`.
StepShare unpackStep(const int64_t* v, const rundb::Step& mine) {
  StepShare share{mine, v[kStopRequest]};
  rundb::Step& s = share.step;
  s.peak_bytes = v[kPeakBytes];
  s.param_bytes = v[kParamBytes];
  s.grad_bytes = v[kGradBytes];
  s.optim_bytes = v[kOptimBytes];
  s.activation_bytes = v[kActivationBytes];
  s.step_time_ns = v[kStepTimeNs];
  s.start_ns = v[kStartNs];
  return share;
}

}  // namespace

std::vector<StepShare> allGatherStep(Comm& comm, const rundb::Step& mine, int64_t stop_request,
                                     const std::string& device) {
  const int world = comm.layout().world;
  const StepSlots packed = packStep(mine, stop_request);
  at::Tensor own = at::tensor(at::ArrayRef<int64_t>(packed.data(), packed.size())).to(at::Device(device));
  at::Tensor all = at::empty({world * kStepSlots}, own.options());  // (world, kStepSlots)
  comm.world().allGather(all, own);
  all = all.cpu();
  const int64_t* v = all.data_ptr<int64_t>();
  std::vector<StepShare> shares;
  shares.reserve(size_t(world));
  for (int q = 0; q < world; ++q) shares.push_back(unpackStep(v + size_t(q) * kStepSlots, mine));
  return shares;
}

// Clock offsets: rank 0 answers each ping ("clock/TAG/RANK/I/ping") with its clock (".../pong").
rundb::ClockSample syncClock(Comm& comm, const std::string& tag, int rounds) {
  const Layout& l = comm.layout();
  if (l.world == 1) return {};
  const std::string base = "clock/" + tag + "/";
  if (l.rank == 0) {
    for (int r = 1; r < l.world; ++r)
      for (int i = 0; i < rounds; ++i) {
        const std::string k = base + std::to_string(r) + "/" + std::to_string(i);
        comm.storeGet(k + "/ping");
        comm.storeSet(k + "/pong", std::to_string(nowNs()));
      }
    return {};
  }
  int i = 0;
  return rundb::measureClockOffset(
      [&] {
        const std::string k = base + std::to_string(l.rank) + "/" + std::to_string(i++);
        comm.storeSet(k + "/ping", "1");
        return std::stoll(comm.storeGet(k + "/pong"));
      },
      rounds);
}

nlohmann::json toJson(const rundb::Collective& c) {
  return {{"op", c.op},   {"group", c.group}, {"rank", c.rank},         {"group_size", c.group_size},
          {"seq", c.seq}, {"bytes", c.bytes}, {"start_ns", c.start_ns}, {"end_ns", c.end_ns}};
}

void fromJson(const nlohmann::json& j, rundb::Collective* c) {
  c->op = j.at("op").get<std::string>();
  c->group = j.at("group").get<std::string>();
  c->rank = j.at("rank").get<int64_t>();
  c->group_size = j.at("group_size").get<int64_t>();
  c->seq = j.at("seq").get<int64_t>();
  c->bytes = j.at("bytes").get<int64_t>();
  c->start_ns = j.at("start_ns").get<int64_t>();
  c->end_ns = j.at("end_ns").get<int64_t>();
}

nlohmann::json toJson(const rundb::WeightDigest& d) {
  return {{"name", d.name}, {"sum", d.sum}, {"sumsq", d.sumsq}, {"abssum", d.abssum}};
}

void fromJson(const nlohmann::json& j, rundb::WeightDigest* d) {
  d->name = j.at("name").get<std::string>();
  d->sum = j.at("sum").get<double>();
  d->sumsq = j.at("sumsq").get<double>();
  d->abssum = j.at("abssum").get<double>();
}

nlohmann::json toJson(const rundb::ShardInfo& s) {
  return {{"path", s.path},
          {"rank", s.rank},
          {"host", s.host},
          {"device", s.device},
          {"pid", s.pid},
          {"offset_start_ns", s.offset_start_ns},
          {"offset_end_ns", s.offset_end_ns}};
}

void fromJson(const nlohmann::json& j, rundb::ShardInfo* s) {
  s->path = j.at("path").get<std::string>();
  s->rank = j.at("rank").get<int64_t>();
  s->host = j.at("host").get<std::string>();
  s->device = j.at("device").get<std::string>();
  s->pid = j.at("pid").get<int64_t>();
  s->offset_start_ns = j.at("offset_start_ns").get<int64_t>();
  s->offset_end_ns = j.at("offset_end_ns").get<int64_t>();
}

nlohmann::json toJson(const rundb::ExpertLoad& e) {
  return {{"rank", e.rank},       {"step", e.step},         {"layer", e.layer},
          {"expert", e.expert},   {"tokens", e.tokens},     {"dropped", e.dropped},
          {"capacity", e.capacity}, {"aux_loss", e.aux_loss}, {"z_loss", e.z_loss}};
}

nlohmann::json toJson(const rundb::Fp8Scale& e) {
  return {{"rank", e.rank}, {"step", e.step}, {"tensor", e.tensor}, {"role", e.role}, {"amax", e.amax}, {"scale", e.scale}};
}

void fromJson(const nlohmann::json& j, rundb::Fp8Scale* e) {
  e->rank = j.at("rank").get<int64_t>();
  e->step = j.at("step").get<int64_t>();
  e->tensor = j.at("tensor").get<std::string>();
  e->role = j.at("role").get<std::string>();
  e->amax = j.at("amax").get<double>();
  e->scale = j.at("scale").get<double>();
}

void fromJson(const nlohmann::json& j, rundb::ExpertLoad* e) {
  e->rank = j.at("rank").get<int64_t>();
  e->step = j.at("step").get<int64_t>();
  e->layer = j.at("layer").get<int64_t>();
  e->expert = j.at("expert").get<int64_t>();
  e->tokens = j.at("tokens").get<int64_t>();
  e->dropped = j.at("dropped").get<int64_t>();
  e->capacity = j.at("capacity").get<int64_t>();
  e->aux_loss = j.at("aux_loss").get<double>();
  e->z_loss = j.at("z_loss").get<double>();
}

namespace {

// "key/RANK/chunks" holds how many chunks rank RANK wrote; "key/RANK/I" holds chunk I.
std::string chunkKey(const std::string& key, int rank, const std::string& part) {
  return key + "/" + std::to_string(rank) + "/" + part;
}

void publish(Comm& comm, const std::string& key, int rank, const std::string& text) {
  const size_t chunks = std::max<size_t>(1, (text.size() + kExchangeChunkBytes - 1) / kExchangeChunkBytes);
  for (size_t i = 0; i < chunks; ++i)
    comm.storeSet(chunkKey(key, rank, std::to_string(i)), text.substr(i * kExchangeChunkBytes, kExchangeChunkBytes));
  comm.storeSet(chunkKey(key, rank, "chunks"), std::to_string(chunks));
}

std::string collect(Comm& comm, const std::string& key, int rank) {
  const size_t chunks = std::stoull(comm.storeGet(chunkKey(key, rank, "chunks")));
  std::string text;
  for (size_t i = 0; i < chunks; ++i) text += comm.storeGet(chunkKey(key, rank, std::to_string(i)));
  return text;
}

}  // namespace

std::vector<nlohmann::json> gatherJsonOnLeader(Comm& comm, const std::string& key, const nlohmann::json& rows) {
  const Layout& l = comm.layout();
  if (l.world == 1) return {rows};
  publish(comm, key, l.rank, jsonText(rows));
  comm.world().barrier();  // every rank's rows are in the store
  if (l.rank != 0) return {};
  std::vector<nlohmann::json> all;
  all.reserve(size_t(l.world));
  for (int q = 0; q < l.world; ++q) all.push_back(nlohmann::json::parse(collect(comm, key, q)));
  return all;
}

}  // namespace trainscope::runtime
