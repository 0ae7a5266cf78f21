// trainscope/runtime/comm.h — process groups over real collective engines, with per-collective
// metrics. The one wrapper around c10d (Gloo for CPU tensors, NCCL for CUDA tensors); nothing
// else in trainscope includes c10d or NCCL headers.
//
// Every call records op, group, bytes, start/end (rundb::Collective, with nccl-tests' bandwidths).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainscope/rundb/rows.h"
#include "trainscope/runtime/parallel.h"

namespace trainscope::runtime {

// One collective as this rank saw it: the run database's own row, with its bandwidth rule.
using CollectiveRecord = rundb::Collective;

class CollectiveLog {
 public:
  void add(CollectiveRecord r);
  std::vector<CollectiveRecord> take();  // and clear
 private:
  std::mutex mu_;
  std::vector<CollectiveRecord> records_;
};

// An asynchronous collective in flight.
class Pending {
 public:
  virtual ~Pending() = default;
  virtual void wait() = 0;
  virtual int64_t endNs() const = 0;  // when it completed (valid after wait)
  virtual int64_t startNs() const = 0;
};

enum class Reduce { Sum, Max };

class Group {
 public:
  virtual ~Group() = default;
  const std::string& name() const { return name_; }
  int rank() const { return rank_; }  // rank within the group
  int size() const { return size_; }
  const std::vector<int>& members() const { return members_; }  // global ranks

  void allReduce(at::Tensor& t, Reduce op = Reduce::Sum) { allReduceAsync(t, op)->wait(); }
  virtual std::shared_ptr<Pending> allReduceAsync(at::Tensor& t, Reduce op = Reduce::Sum) = 0;
  // out (n) <- sum over ranks of in[rank*n : (rank+1)*n], in has size()*n elements
  virtual void reduceScatter(at::Tensor& out, at::Tensor& in) = 0;
  // The same, returning at once: ZeRO-2 reduce-scatters each gradient bucket while backward goes on.
  virtual std::shared_ptr<Pending> reduceScatterAsync(at::Tensor& out, at::Tensor& in) = 0;
  // out (size()*n) <- concatenation of every rank's in (n)
  virtual void allGather(at::Tensor& out, at::Tensor& in) = 0;
  // The same, returning while it runs (ZeRO-3 prefetches the next layer's parameters); out and in
  // must stay alive until wait().
  virtual std::shared_ptr<Pending> allGatherAsync(at::Tensor& out, at::Tensor& in) = 0;
  virtual void broadcast(at::Tensor& t, int root) = 0;
  // Rows of `in` (dim 0) in size() consecutive blocks of in_splits[q] rows go to rank q; `out`
  // receives out_splits[q] rows from rank q, in rank order (c10d's alltoall_base). Expert parallelism
  // dispatches tokens to their experts' ranks with it. Recorded as all_to_all with in's bytes.
  virtual void allToAll(at::Tensor& out, at::Tensor& in, const std::vector<int64_t>& out_splits,
                        const std::vector<int64_t>& in_splits) = 0;
  // Point to point; dst/src are ranks within the group. send is asynchronous (wait on the result
  // before reusing the tensor), recv blocks.
  virtual std::shared_ptr<Pending> send(at::Tensor& t, int dst, int tag) = 0;
  virtual void recv(at::Tensor& t, int src, int tag) = 0;
  // recv that returns at once: `t` holds the message after wait() (the context-parallel ring
  // receives the next K/V block while it computes on the current one).
  virtual std::shared_ptr<Pending> recvAsync(at::Tensor& t, int src, int tag) = 0;
  virtual void barrier() = 0;

 protected:
  std::string name_;
  int rank_ = 0, size_ = 1;
  std::vector<int> members_;
};

struct CommOptions {
  std::string device = "cpu";                      // "cpu" → Gloo, "cuda:N" → NCCL
  std::chrono::milliseconds rendezvous_timeout{60000};
  std::chrono::milliseconds collective_timeout{300000};
};

class Comm {
 public:
  // Connects to the rendezvous store (rank 0 hosts it) and builds every group this rank is in.
  // Throws RuntimeError naming MASTER_ADDR:MASTER_PORT when the rendezvous cannot complete in time.
  static std::unique_ptr<Comm> connect(const RankEnv& env, const Layout& layout, const CommOptions& opts);
  // A single process: every group has one member and collectives are no-ops (records nothing).
  static std::unique_ptr<Comm> single();
  virtual ~Comm() = default;

  const Layout& layout() const { return layout_; }
  Group& world() { return *world_; }
  Group& dp() { return *dp_; }
  Group& tp() { return *tp_; }
  Group& pp() { return *pp_; }
  Group& cp() { return *cp_; }                        // one member when cp = 1
  Group& dpCp() { return dp_cp_ ? *dp_cp_ : *dp_; }  // gradients' group: dp x cp (dp itself when cp = 1)
  Group& embedding() { return *embedding_; }
  // A sub-group of ranks built on first use and kept (ZeRO-3's shard and replica groups): every
  // member must ask for it, with the same name and members, in the same order as the others.
  virtual Group& subGroup(const std::string& name, const std::vector<int>& members) = 0;
  CollectiveLog& log() { return *log_; }

  // Small key/value exchange through the rendezvous store (metrics at the end of a run).
  virtual void storeSet(const std::string& key, const std::string& value) = 0;
  virtual std::string storeGet(const std::string& key) = 0;

 protected:
  Layout layout_;
  std::shared_ptr<CollectiveLog> log_ = std::make_shared<CollectiveLog>();
  std::unique_ptr<Group> world_, dp_, tp_, pp_, embedding_;
  std::unique_ptr<Group> cp_, dp_cp_;  // dp_cp_ only when cp > 1
};

}  // namespace trainscope::runtime
