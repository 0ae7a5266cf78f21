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
#include <c10/util/Logging.h>

#include "comm/comm_impl.h"
#include "comm/watch.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
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

// LibTorch's errors carry a C++ backtrace in what(); a user needs the sentence before it.
std::string withoutBacktrace(const std::exception& e) {
  if (auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

// Waits on a c10d Work; completion time comes from the work's future callback, so an async
// all-reduce that finished long before wait() is recorded when it actually finished.
class C10dPending final : public Pending {
 public:
  C10dPending(c10::intrusive_ptr<c10d::Work> work, CollectiveRecord rec, std::shared_ptr<CollectiveLog> log,
              std::shared_ptr<Watch> watch = nullptr, const std::vector<int>* members = nullptr)
      : work_(std::move(work)), state_(std::make_shared<State>()), watch_(std::move(watch)) {
    if (members) members_ = *members;
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
    // After a failed collective the peers may never answer: the work keeps its tensors alive itself,
    // and the process is about to report and exit.
    if (waited_ || (watch_ && watch_->broken())) return;
    try {
      watch_ = nullptr;  // unwinding after an error: that one was diagnosed already
      wait();
    } catch (...) {
    }
  }
  void wait() override {
    if (waited_) return;
    try {
      work_->wait();
    } catch (const std::exception& e) {
      waited_ = true;
      // A timeout, or a peer gone: name who did not arrive (Watch), not only this rank that waited.
      const CollectiveRecord& r = state_->rec;
      if (watch_) watch_->markBroken();
      const std::string why = withoutBacktrace(e);
      const int64_t waited_ms = (tracer::nowNs() - r.start_ns) / 1000000;
      const std::string who = watch_ ? watch_->whoIsMissing(r.group, members_, r.seq) : std::string();
      TRAINSCOPE_THROW(r.op + " #" + std::to_string(r.seq) + " of group " + r.group + " (ranks " + joinRanks(members_) +
                       ") failed on rank " + std::to_string(r.rank) + " after " + std::to_string(waited_ms) +
                       " ms: " + why.substr(0, why.find('\n')) + (who.empty() ? "" : "; " + who));
    }
    waited_ = true;
    if (state_->done_ns == 0) state_->done_ns = tracer::nowNs();
    state_->rec.end_ns = state_->done_ns;
    state_->log->add(state_->rec);
    // Gloo's worker thread holds the finished work, and with it the tensors it was given, until it
    // takes its queue's lock again: a moment, or longer on a busy machine. Waiting for it here frees
    // what only the work held (a copy, a sent activation) at wait(), on this thread, not at a moment
    // of the worker's: the measured peak would otherwise move run to run.
    if (settle_) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      for (int spins = 0; work_.use_count() > 1 && std::chrono::steady_clock::now() < until; ++spins) {
        if (spins < 64) std::this_thread::yield();  // the worker takes its lock again at once, usually
        else std::this_thread::sleep_for(std::chrono::microseconds(20));  // descheduled: leave it the core
      }
    }
    work_.reset();
    if (then_) std::exchange(then_, nullptr)();
  }
  // Runs on the waiting thread once the work is done and dropped.
  void then(std::function<void()> f) { then_ = std::move(f); }
  // Gloo's works: wait() also waits, briefly, for the engine to let go of the work.
  C10dPending& settled(bool on) {
    settle_ = on;
    return *this;
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
  std::shared_ptr<Watch> watch_;
  std::vector<int> members_;
  bool waited_ = false;
  bool settle_ = false;
  std::function<void()> then_;
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
            std::shared_ptr<CollectiveLog> log, std::shared_ptr<Watch> watch)
      : backend_(std::move(backend)), log_(std::move(log)), watch_(std::move(watch)), global_rank_(global_rank) {
    name_ = std::move(name);
    members_ = std::move(members);
    size_ = static_cast<int>(members_.size());
    for (int i = 0; i < size_; ++i)
      if (members_[i] == global_rank) rank_ = i;
  }
  // ProcessGroupGloo's destructor waits for its queued work, each piece up to the collective timeout,
  // when a peer is stopped: after a failure the backend is left to the process's exit.
  ~C10dGroup() override {
    if (watch_ && watch_->broken()) (void)backend_.release();
  }

  std::shared_ptr<Pending> allReduceAsync(at::Tensor& t, Reduce op) override {
    if (size_ == 1) return std::make_shared<DonePending>();
    std::vector<at::Tensor> v{t};
    c10d::AllreduceOptions o;
    o.reduceOp = op == Reduce::Sum ? c10d::ReduceOp::SUM : c10d::ReduceOp::MAX;
    auto rec = record("all_reduce", t.nbytes());
    return pending(backend_->allreduce(v, o), rec);
  }
  void reduceScatter(at::Tensor& out, at::Tensor& in) override { reduceScatterAsync(out, in)->wait(); }
  std::shared_ptr<Pending> reduceScatterAsync(at::Tensor& out, at::Tensor& in) override {
    if (size_ == 1) {
      out.copy_(in);
      return std::make_shared<DonePending>();
    }
    auto rec = record("reduce_scatter", in.nbytes());
    if (!gloo_)
      return pending(backend_->_reduce_scatter_base(out, in), rec);
    // Gloo's _reduce_scatter_base all-reduces a copy of `in` and keeps that copy in its work, which
    // its worker thread releases at a moment of its own: the copy's bytes (a whole ZeRO-2 bucket)
    // then outlived the wait now and then and met the next micro-batch's activations, so the
    // measured peak moved run to run. The same all-reduce of a copy made and freed here, at wait().
    auto copy = std::make_shared<at::Tensor>(in.clone());
    std::vector<at::Tensor> v{*copy};
    auto work = pending(backend_->allreduce(v), rec);
    v.clear();
    work->then([copy, out, rank = rank_, size = size_]() mutable {
      out.copy_(copy->chunk(size)[rank]);
      *copy = at::Tensor();
    });
    return work;
  }
  void allGather(at::Tensor& out, at::Tensor& in) override {
    if (size_ == 1) return void(out.copy_(in));
    if (!gloo_ && !in.is_cuda()) {
      // NCCL takes CUDA tensors only (ProcessGroupNCCL: "Tensors must be CUDA and dense"); the
      // checkpoint's gathers (state/gather.cpp, state/optim_state.cpp) hold host copies: through the
      // rank's current GPU (train.cpp makes it current), then back into `out`.
      at::Tensor d_in = in.to(at::kCUDA), d_out = at::empty(out.sizes(), out.options().device(at::kCUDA));
      allGather(d_out, d_in);
      out.copy_(d_out);  // on the current stream, which wait() ordered after the collective
      return;
    }
    pending(backend_->_allgather_base(out, in), record("all_gather", out.nbytes()))->wait();
  }
  std::shared_ptr<Pending> allGatherAsync(at::Tensor& out, at::Tensor& in) override {
    if (size_ == 1) {
      out.copy_(in);
      return std::make_shared<DonePending>();
    }
    auto rec = record("all_gather", out.nbytes());
    return pending(backend_->_allgather_base(out, in), rec);
  }
  void allToAll(at::Tensor& out, at::Tensor& in, const std::vector<int64_t>& out_splits,
                const std::vector<int64_t>& in_splits) override {
    if (size_ == 1) return void(out.copy_(in));
    std::vector<int64_t> o(out_splits), i(in_splits);  // c10d takes them by non-const reference
    pending(backend_->alltoall_base(out, in, o, i), record("all_to_all", in.nbytes()))->wait();
  }
  void broadcast(at::Tensor& t, int root) override {
    if (size_ == 1) return;
    std::vector<at::Tensor> v{t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    pending(backend_->broadcast(v, o), record("broadcast", t.nbytes()))->wait();
  }
  std::shared_ptr<Pending> send(at::Tensor& t, int dst, int tag) override {
    std::vector<at::Tensor> v{t};
    auto rec = record("send", t.nbytes());
    return pending(backend_->send(v, dst, tag), rec);
  }
  void recv(at::Tensor& t, int src, int tag) override { recvAsync(t, src, tag)->wait(); }
  std::shared_ptr<Pending> recvAsync(at::Tensor& t, int src, int tag) override {
    std::vector<at::Tensor> v{t};
    auto rec = record("recv", t.nbytes());
    return pending(backend_->recv(v, src, tag), rec);
  }
  void barrier() override {
    if (size_ == 1) return;
    pending(backend_->barrier(), record("barrier", 0))->wait();
  }

 private:
  std::shared_ptr<C10dPending> pending(c10::intrusive_ptr<c10d::Work> work, CollectiveRecord rec) {
    auto p = std::make_shared<C10dPending>(std::move(work), std::move(rec), log_, watch_, &members_);
    p->settled(gloo_);
    return p;
  }
  CollectiveRecord record(const char* op, int64_t bytes) {
    CollectiveRecord r;
    r.op = op;
    r.group = name_;
    r.rank = global_rank_;
    r.group_size = size_;
    r.seq = seq_++;
    r.bytes = bytes;
    if (watch_) watch_->entered(name_, op, r.seq);
    r.start_ns = tracer::nowNs();
    return r;
  }
  c10::intrusive_ptr<c10d::Backend> backend_;
  std::shared_ptr<CollectiveLog> log_;
  std::shared_ptr<Watch> watch_;
  int global_rank_;
  bool gloo_ = backend_->getBackendName() == "gloo";
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
  std::shared_ptr<Pending> reduceScatterAsync(at::Tensor& out, at::Tensor& in) override {
    out.copy_(in);
    return std::make_shared<DonePending>();
  }
  void allGather(at::Tensor& out, at::Tensor& in) override { out.copy_(in); }
  std::shared_ptr<Pending> allGatherAsync(at::Tensor& out, at::Tensor& in) override {
    out.copy_(in);
    return std::make_shared<DonePending>();
  }
  void allToAll(at::Tensor& out, at::Tensor& in, const std::vector<int64_t>&, const std::vector<int64_t>&) override {
    out.copy_(in);
  }
  void broadcast(at::Tensor&, int) override {}
  std::shared_ptr<Pending> send(at::Tensor&, int, int) override {
    TRAINSCOPE_THROW("send in a single-process group");
  }
  void recv(at::Tensor&, int, int) override { TRAINSCOPE_THROW("recv in a single-process group"); }
  std::shared_ptr<Pending> recvAsync(at::Tensor&, int, int) override {
    TRAINSCOPE_THROW("recv in a single-process group");
  }
  void barrier() override {}
};

// The rendezvous, every step bounded by `timeout` whatever the other end does:
//   1. connect to the store (rank 0 hosts it). On a thread with a deadline: a program that is not a
//      TCPStore may hold MASTER_PORT, accept the connection and never answer, and LibTorch's client
//      then waits without one. A port rank 0 cannot bind is said to be in use, at once.
//   2. every rank sets joined/<rank>; rank 0 waits for all of them and names the ranks that stayed
//      silent when the time is up, then sets `go`, which the others wait for.
c10::intrusive_ptr<c10d::Store> rendezvous(const RankEnv& env, std::chrono::milliseconds timeout) {
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  char secs_text[32];
  std::snprintf(secs_text, sizeof(secs_text), "%g s", double(timeout.count()) / 1000.0);
  const std::string secs = secs_text;
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(env.master_port);
  so.isServer = env.rank == 0;
  so.numWorkers = env.world;
  so.waitWorkers = false;  // joining is checked below, naming who is missing
  so.timeout = timeout;
  auto promise = std::make_shared<std::promise<c10::intrusive_ptr<c10d::TCPStore>>>();
  std::future<c10::intrusive_ptr<c10d::TCPStore>> connected = promise->get_future();
  // c10d logs each failed attempt with a C++ backtrace (gated on c10's log level): quiet while
  // connecting; the outcome is reported below in one sentence.
  const int log_level = FLAGS_caffe2_log_level;
  FLAGS_caffe2_log_level = 3;  // FATAL only
  std::thread([promise, addr = env.master_addr, so] {
    try {
      promise->set_value(c10::make_intrusive<c10d::TCPStore>(addr, so));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  }).detach();  // on a deadline the thread is left blocked; the rank is about to exit anyway
  // LibTorch's client retries once after a failed attempt (about twice the timeout in all): wait for
  // its own answer that long, and a little more.
  const auto deadline = 2 * timeout + std::chrono::seconds(3);
  const bool answered = connected.wait_for(deadline) == std::future_status::ready;
  FLAGS_caffe2_log_level = log_level;
  if (!answered)
    TRAINSCOPE_THROW("rendezvous: rank " + std::to_string(env.rank) + " got no answer from " + where + " within " +
                     std::to_string(std::chrono::duration_cast<std::chrono::seconds>(deadline).count()) +
                     " s — is MASTER_PORT held by another program? Choose a free MASTER_PORT, or check MASTER_ADDR");
  c10::intrusive_ptr<c10d::TCPStore> store;
  try {
    store = connected.get();
  } catch (const std::exception& e) {
    const std::string why = withoutBacktrace(e);
    if (env.rank == 0 && (why.find("ddress already in use") != std::string::npos || why.find("EADDRINUSE") != std::string::npos))
      TRAINSCOPE_THROW("rendezvous: MASTER_PORT " + std::to_string(env.master_port) + " on " + env.master_addr +
                       " is in use by another program — choose a free MASTER_PORT");
    TRAINSCOPE_THROW("rendezvous with " + where + " (rank " + std::to_string(env.rank) + " of " +
                     std::to_string(env.world) + ") did not complete within " + secs + ": " + why +
                     " — check MASTER_ADDR/MASTER_PORT and that every rank started");
  }
  const std::string prefix = "trainscope/rendezvous/";
  try {
    store->set(prefix + "joined/" + std::to_string(env.rank), std::vector<uint8_t>{1});
    if (env.rank == 0) {
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      for (;;) {
        std::vector<int> missing;
        for (int r = 1; r < env.world; ++r)
          if (!store->check({prefix + "joined/" + std::to_string(r)})) missing.push_back(r);
        if (missing.empty()) break;
        if (std::chrono::steady_clock::now() > deadline)
          TRAINSCOPE_THROW("rendezvous at " + where + ": rank" + (missing.size() > 1 ? "s " : " ") + joinRanks(missing) +
                           " of " + std::to_string(env.world) + " did not join within " + secs +
                           " — check that they started, with this MASTER_ADDR/MASTER_PORT (--rendezvous-timeout waits longer)");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      store->set(prefix + "go", std::vector<uint8_t>{1});
    } else {
      // Bounded here as well: a rank 0 stopped now answers nothing, and the client would wait for ever.
      const auto bound = timeout + std::chrono::milliseconds(Watch::kStoreTimeout);
      const auto went = withDeadline<bool>(
          [store, key = prefix + "go", timeout] {
            store->wait({key}, timeout);
            return true;
          },
          bound);
      if (!went)
        TRAINSCOPE_THROW("rendezvous at " + where + " (rank " + std::to_string(env.rank) + " of " +
                         std::to_string(env.world) + "): " +
                         Watch::silentStoreClause(std::chrono::duration_cast<std::chrono::milliseconds>(bound)));
    }
  } catch (const trainscope::RuntimeError&) {
    throw;
  } catch (const std::exception& e) {
    TRAINSCOPE_THROW("rendezvous at " + where + " (rank " + std::to_string(env.rank) + " of " + std::to_string(env.world) +
                     "): not every rank joined within " + secs + ": " + withoutBacktrace(e));
  }
  return store;
}

class C10dComm final : public Comm {
 public:
  C10dComm(const RankEnv& env, const Layout& layout, const CommOptions& opts) {
    layout_ = layout;
    store_ = rendezvous(env, opts.rendezvous_timeout);
    store_->setTimeout(opts.collective_timeout);
    watch_ = std::make_shared<Watch>(env, layout.rank);
    // c10d logs warnings with a C++ backtrace (a store write to a rank that has ended, Gloo's
    // retries) that land in the run's output before trainscope's own one-sentence error: from here
    // on only c10's errors are printed, unless TORCH_CPP_LOG_LEVEL asks otherwise.
    if (!std::getenv("TORCH_CPP_LOG_LEVEL")) FLAGS_caffe2_log_level = std::max(FLAGS_caffe2_log_level, 2);
    cuda_ = opts.device.rfind("cuda", 0) == 0;
    host_ = env.master_addr == "localhost" ? "127.0.0.1" : env.master_addr;
    collective_timeout_ = opts.collective_timeout;
    auto make = [&](const std::string& name, const std::vector<int>& members) -> std::unique_ptr<Group> {
      return makeGroup(name, members);
    };
    std::vector<int> all(layout_.world);
    for (int r = 0; r < layout_.world; ++r) all[r] = r;
    world_ = make("world", all);
    dp_ = make("dp", layout_.dpGroup());
    tp_ = make("tp", layout_.tpGroup());
    pp_ = make("pp", layout_.ppGroup());
    if (layout_.cp > 1) {
      cp_ = make("cp", layout_.cpGroup());
      dp_cp_ = make("dp_cp", layout_.dpCpGroup());
    } else {
      cp_ = std::make_unique<SingleGroup>("cp");
    }
    // Only the first and last stage hold the tied embedding; middle stages get a one-rank stand-in
    // (they never use it, and must not join the real group's rendezvous).
    const auto emb = layout_.embeddingGroup();
    if (std::find(emb.begin(), emb.end(), layout_.rank) != emb.end()) embedding_ = make("embedding", emb);
    else embedding_ = std::make_unique<SingleGroup>("embedding");
  }

  Group& subGroup(const std::string& name, const std::vector<int>& members) override {
    std::unique_ptr<Group>& g = sub_[name];
    if (!g) g = makeGroup(name, members);
    return *g;
  }

  std::unique_ptr<Group> makeGroup(const std::string& name, const std::vector<int>& members) {
    const std::string& host = host_;
    std::string prefix = name;
    for (int m : members) prefix += "_" + std::to_string(m);
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store_);
    int group_rank = 0;
    for (size_t i = 0; i < members.size(); ++i)
      if (members[i] == layout_.rank) group_rank = static_cast<int>(i);
    // Creating either engine's group goes through the store (Gloo's connections, NCCL's unique id):
    // bounded like every store access, so that a stopped rank 0 is named instead of waited on.
    const int size = static_cast<int>(members.size());
    std::function<c10::intrusive_ptr<c10d::Backend>()> create;
    if (cuda_) {
      const auto timeout = collective_timeout_;
      create = [prefixed, group_rank, size, timeout] { return makeNcclBackend(prefixed, group_rank, size, timeout); };
    } else {
      auto o = c10d::ProcessGroupGloo::Options::create(collective_timeout_);
      // Loopback when every rank is on this host; otherwise the address this host resolves to.
      o->devices.push_back(host == "127.0.0.1" ? c10d::ProcessGroupGloo::createDeviceForHostname(host)
                                               : c10d::ProcessGroupGloo::createDefaultDevice());
      create = [prefixed, group_rank, size, o] {
        return c10::intrusive_ptr<c10d::Backend>(c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, group_rank, size, o));
      };
    }
    auto made = withDeadline<c10::intrusive_ptr<c10d::Backend>>(create, storeDeadline());
    if (!made) {
      watch_->markBroken();
      const std::string who = watch_->whoIsMissing("", members, -1);
      TRAINSCOPE_THROW("creating process group " + name + " (ranks " + joinRanks(members) + ") on rank " +
                       std::to_string(layout_.rank) + ": no answer within " + seconds(storeDeadline()) +
                       (who.empty() ? "" : "; " + who));
    }
    const c10::intrusive_ptr<c10d::Backend> backend = *made;
    return std::make_unique<C10dGroup>(name, members, layout_.rank, backend, log_, watch_);
  }

  // Store accesses wait on a thread of their own, up to the collective timeout and the store's own
  // (watch.h): a stopped rank 0 answers nothing, and LibTorch's client would wait for it forever.
  void storeSet(const std::string& key, const std::string& value) override {
    auto store = store_;
    std::optional<bool> done;
    try {
      done = withDeadline<bool>(
          [store, key, value] {
            store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
            return true;
          },
          storeDeadline());
    } catch (const std::exception& e) {
      storeFailed("writing \"" + key + "\" to", withoutBacktrace(e));
    }
    if (!done) storeFailed("writing \"" + key + "\" to", "no answer within " + seconds(storeDeadline()));
  }
  std::string storeGet(const std::string& key) override {
    auto store = store_;
    std::optional<std::vector<uint8_t>> v;
    try {
      v = withDeadline<std::vector<uint8_t>>([store, key] { return store->get(key); }, storeDeadline());
    } catch (const std::exception& e) {
      storeFailed("reading \"" + key + "\" from", withoutBacktrace(e));  // a key another rank should have set in time
    }
    if (!v) storeFailed("reading \"" + key + "\" from", "no answer within " + seconds(storeDeadline()));
    return std::string(v->begin(), v->end());
  }
  ~C10dComm() override { watch_->stop(); }  // before the groups and the store go

 private:
  std::chrono::milliseconds storeDeadline() const { return collective_timeout_ + Watch::kStoreTimeout; }
  static std::string seconds(std::chrono::milliseconds t) { return std::to_string((t.count() + 999) / 1000) + " s"; }

  // Names who is stopped or hung (Watch), not only this rank that waited.
  [[noreturn]] void storeFailed(const std::string& what, const std::string& why) {
    watch_->markBroken();
    std::vector<int> all(layout_.world);
    for (int r = 0; r < layout_.world; ++r) all[r] = r;
    const std::string who = watch_->whoIsMissing("", all, -1);
    TRAINSCOPE_THROW(what + " the rendezvous store failed on rank " +
                     std::to_string(layout_.rank) + ": " + why.substr(0, why.find('\n')) + (who.empty() ? "" : "; " + who));
  }

  c10::intrusive_ptr<c10d::Store> store_;
  std::shared_ptr<Watch> watch_;
  bool cuda_ = false;
  std::string host_;
  std::chrono::milliseconds collective_timeout_{0};
  std::map<std::string, std::unique_ptr<Group>> sub_;
};

class SingleComm final : public Comm {
 public:
  SingleComm() {
    world_ = std::make_unique<SingleGroup>("world");
    dp_ = std::make_unique<SingleGroup>("dp");
    tp_ = std::make_unique<SingleGroup>("tp");
    pp_ = std::make_unique<SingleGroup>("pp");
    cp_ = std::make_unique<SingleGroup>("cp");
    embedding_ = std::make_unique<SingleGroup>("embedding");
  }
  void storeSet(const std::string& key, const std::string& value) override { kv_[key] = value; }
  std::string storeGet(const std::string& key) override { return kv_[key]; }
  Group& subGroup(const std::string& name, const std::vector<int>&) override {
    std::unique_ptr<Group>& g = sub_[name];
    if (!g) g = std::make_unique<SingleGroup>(name);
    return *g;
  }

 private:
  std::map<std::string, std::string> kv_;
  std::map<std::string, std::unique_ptr<Group>> sub_;
};

}  // namespace

std::unique_ptr<Comm> Comm::connect(const RankEnv& env, const Layout& layout, const CommOptions& opts) {
  if (!env.distributed || env.world == 1) return single();
  return std::make_unique<C10dComm>(env, layout, opts);
}

std::unique_ptr<Comm> Comm::single() { return std::make_unique<SingleComm>(); }

}  // namespace trainscope::runtime
