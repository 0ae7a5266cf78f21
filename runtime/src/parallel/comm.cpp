// comm.cpp — Group/Comm over c10d: ProcessGroupGloo for CPU tensors, ProcessGroupNCCL for CUDA
// tensors (comm_nccl.cpp), both rendezvousing through one c10d TCPStore hosted by rank 0.
//
// Gloo's headers are not in the torch wheel; they come from Debian's libgloo-dev and are used for
// declarations only (the Gloo code that runs is the copy inside libtorch_cpu). In torch 2.11 Gloo
// implements all_reduce, _reduce_scatter_base, _allgather_base, broadcast, send/recv and barrier
// itself, so nothing is composed here (1.13 lacked the two *_base collectives).
#include "trainscope/runtime/comm.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <ATen/ATen.h>

#include "parallel/comm_impl.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <utility>
#include "trainscope/common/error.h"
#include "trainscope/tracer/range.h"

namespace trainscope::runtime {

void CollectiveLog::add(CollectiveRecord r) {
  std::lock_guard<std::mutex> lock(mu_);
  records_.push_back(std::move(r));
}

std::vector<CollectiveRecord> CollectiveLog::take() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(records_, {});
}

namespace {

// Waits on a c10d Work; completion time comes from the work's future callback, so an async
// all-reduce that finished long before wait() is recorded when it actually finished.
class C10dPending final : public Pending {
 public:
  C10dPending(c10::intrusive_ptr<c10d::Work> work, CollectiveRecord rec, std::shared_ptr<CollectiveLog> log)
      : work_(std::move(work)), state_(std::make_shared<State>()) {
    state_->rec = std::move(rec);
    state_->log = std::move(log);
    auto st = state_;
    try {
      work_->getFuture()->addCallback([st](c10::ivalue::Future&) { st->done_ns = tracer::nowNs(); });
    } catch (const c10::Error&) {
      // Some Gloo work types (send/recv, the *_base collectives) have no future; their end time is
      // then taken when wait() returns: exact for the blocking calls (recv, reduce-scatter,
      // all-gather), an upper bound for an asynchronous send waited on later.
    }
  }
  ~C10dPending() override {
    if (!waited_) {
      try {
        wait();
      } catch (...) {
      }
    }
  }
  void wait() override {
    if (waited_) return;
    work_->wait();
    waited_ = true;
    if (state_->done_ns == 0) state_->done_ns = tracer::nowNs();
    state_->rec.end_ns = state_->done_ns;
    state_->log->add(state_->rec);
  }
  int64_t endNs() const override { return state_->done_ns; }
  int64_t startNs() const override { return state_->rec.start_ns; }

 private:
  struct State {
    CollectiveRecord rec;
    std::shared_ptr<CollectiveLog> log;
    std::atomic<int64_t> done_ns{0};
  };
  c10::intrusive_ptr<c10d::Work> work_;
  std::shared_ptr<State> state_;
  bool waited_ = false;
};

class DonePending final : public Pending {
 public:
  void wait() override {}
  int64_t endNs() const override { return t_; }
  int64_t startNs() const override { return t_; }
  int64_t t_ = tracer::nowNs();
};

class C10dGroup final : public Group {
 public:
  C10dGroup(std::string name, std::vector<int> members, int global_rank, c10::intrusive_ptr<c10d::Backend> backend,
            std::shared_ptr<CollectiveLog> log)
      : backend_(std::move(backend)), log_(std::move(log)), global_rank_(global_rank) {
    name_ = std::move(name);
    members_ = std::move(members);
    size_ = static_cast<int>(members_.size());
    for (int i = 0; i < size_; ++i)
      if (members_[i] == global_rank) rank_ = i;
  }

  std::shared_ptr<Pending> allReduceAsync(at::Tensor& t, Reduce op) override {
    if (size_ == 1) return std::make_shared<DonePending>();
    std::vector<at::Tensor> v{t};
    c10d::AllreduceOptions o;
    o.reduceOp = op == Reduce::Sum ? c10d::ReduceOp::SUM : c10d::ReduceOp::MAX;
    auto rec = record("all_reduce", t.nbytes());
    return std::make_shared<C10dPending>(backend_->allreduce(v, o), rec, log_);
  }
  void reduceScatter(at::Tensor& out, at::Tensor& in) override {
    if (size_ == 1) return void(out.copy_(in));
    C10dPending(backend_->_reduce_scatter_base(out, in), record("reduce_scatter", in.nbytes()), log_).wait();
  }
  void allGather(at::Tensor& out, at::Tensor& in) override {
    if (size_ == 1) return void(out.copy_(in));
    C10dPending(backend_->_allgather_base(out, in), record("all_gather", out.nbytes()), log_).wait();
  }
  void broadcast(at::Tensor& t, int root) override {
    if (size_ == 1) return;
    std::vector<at::Tensor> v{t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    C10dPending(backend_->broadcast(v, o), record("broadcast", t.nbytes()), log_).wait();
  }
  std::shared_ptr<Pending> send(at::Tensor& t, int dst, int tag) override {
    std::vector<at::Tensor> v{t};
    auto rec = record("send", t.nbytes());
    return std::make_shared<C10dPending>(backend_->send(v, dst, tag), rec, log_);
  }
  void recv(at::Tensor& t, int src, int tag) override {
    std::vector<at::Tensor> v{t};
    C10dPending(backend_->recv(v, src, tag), record("recv", t.nbytes()), log_).wait();
  }
  void barrier() override {
    if (size_ == 1) return;
    C10dPending(backend_->barrier(), record("barrier", 0), log_).wait();
  }

 private:
  CollectiveRecord record(const char* op, int64_t bytes) {
    CollectiveRecord r;
    r.op = op;
    r.group = name_;
    r.rank = global_rank_;
    r.group_size = size_;
    r.seq = seq_++;
    r.bytes = bytes;
    r.start_ns = tracer::nowNs();
    return r;
  }
  c10::intrusive_ptr<c10d::Backend> backend_;
  std::shared_ptr<CollectiveLog> log_;
  int global_rank_;
  int64_t seq_ = 0;
};

class SingleGroup final : public Group {
 public:
  explicit SingleGroup(std::string name) {
    name_ = std::move(name);
    members_ = {0};
  }
  std::shared_ptr<Pending> allReduceAsync(at::Tensor&, Reduce) override { return std::make_shared<DonePending>(); }
  void reduceScatter(at::Tensor& out, at::Tensor& in) override { out.copy_(in); }
  void allGather(at::Tensor& out, at::Tensor& in) override { out.copy_(in); }
  void broadcast(at::Tensor&, int) override {}
  std::shared_ptr<Pending> send(at::Tensor&, int, int) override {
    TRAINSCOPE_THROW("send in a single-process group");
  }
  void recv(at::Tensor&, int, int) override { TRAINSCOPE_THROW("recv in a single-process group"); }
  void barrier() override {}
};

class C10dComm final : public Comm {
 public:
  C10dComm(const RankEnv& env, const Layout& layout, const CommOptions& opts) {
    layout_ = layout;
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env.master_port);
    so.isServer = env.rank == 0;
    so.numWorkers = env.world;
    so.waitWorkers = true;
    so.timeout = opts.rendezvous_timeout;
    try {
      store_ = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
    } catch (const std::exception& e) {
      TRAINSCOPE_THROW("rendezvous with " + env.master_addr + ":" + std::to_string(env.master_port) + " (rank " +
                       std::to_string(env.rank) + " of " + std::to_string(env.world) + ") did not complete within " +
                       std::to_string(opts.rendezvous_timeout.count() / 1000) + " s: " + e.what() +
                       " — check MASTER_ADDR/MASTER_PORT and that every rank started");
    }
    store_->setTimeout(opts.collective_timeout);
    cuda_ = opts.device.rfind("cuda", 0) == 0;
    const std::string host = env.master_addr == "localhost" ? "127.0.0.1" : env.master_addr;
    auto make = [&](const std::string& name, const std::vector<int>& members) -> std::unique_ptr<Group> {
      std::string prefix = name;
      for (int m : members) prefix += "_" + std::to_string(m);
      auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store_);
      int group_rank = 0;
      for (size_t i = 0; i < members.size(); ++i)
        if (members[i] == layout_.rank) group_rank = static_cast<int>(i);
      c10::intrusive_ptr<c10d::Backend> backend;
      if (cuda_) {
        backend = makeNcclBackend(prefixed, group_rank, static_cast<int>(members.size()), opts.collective_timeout);
      } else {
        auto o = c10d::ProcessGroupGloo::Options::create(opts.collective_timeout);
        // Loopback when every rank is on this host; otherwise the address this host resolves to.
        o->devices.push_back(host == "127.0.0.1" ? c10d::ProcessGroupGloo::createDeviceForHostname(host)
                                                 : c10d::ProcessGroupGloo::createDefaultDevice());
        backend = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, group_rank, static_cast<int>(members.size()), o);
      }
      return std::make_unique<C10dGroup>(name, members, layout_.rank, backend, log_);
    };
    std::vector<int> all(layout_.world);
    for (int r = 0; r < layout_.world; ++r) all[r] = r;
    world_ = make("world", all);
    dp_ = make("dp", layout_.dpGroup());
    tp_ = make("tp", layout_.tpGroup());
    pp_ = make("pp", layout_.ppGroup());
    // Only the first and last stage hold the tied embedding; middle stages get a one-rank stand-in
    // (they never use it, and must not join the real group's rendezvous).
    const auto emb = layout_.embeddingGroup();
    if (std::find(emb.begin(), emb.end(), layout_.rank) != emb.end()) embedding_ = make("embedding", emb);
    else embedding_ = std::make_unique<SingleGroup>("embedding");
  }

  void storeSet(const std::string& key, const std::string& value) override {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }
  std::string storeGet(const std::string& key) override {
    auto v = store_->get(key);
    return std::string(v.begin(), v.end());
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  bool cuda_ = false;
};

class SingleComm final : public Comm {
 public:
  SingleComm() {
    world_ = std::make_unique<SingleGroup>("world");
    dp_ = std::make_unique<SingleGroup>("dp");
    tp_ = std::make_unique<SingleGroup>("tp");
    pp_ = std::make_unique<SingleGroup>("pp");
    embedding_ = std::make_unique<SingleGroup>("embedding");
  }
  void storeSet(const std::string& key, const std::string& value) override { kv_[key] = value; }
  std::string storeGet(const std::string& key) override { return kv_[key]; }

 private:
  std::map<std::string, std::string> kv_;
};

}  // namespace

std::unique_ptr<Comm> Comm::connect(const RankEnv& env, const Layout& layout, const CommOptions& opts) {
  if (!env.distributed || env.world == 1) return single();
  return std::make_unique<C10dComm>(env, layout, opts);
}

std::unique_ptr<Comm> Comm::single() { return std::make_unique<SingleComm>(); }

}  // namespace trainscope::runtime
