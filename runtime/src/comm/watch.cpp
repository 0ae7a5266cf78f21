// watch.cpp — see watch.h.
#include "comm/watch.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <atomic>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "trainscope/tracer/thread_names.h"

namespace trainscope::runtime {

std::string joinRanks(const std::vector<int>& r) {
  std::string out;
  for (size_t i = 0; i < r.size(); ++i) out += (i ? (i + 1 == r.size() ? " and " : ", ") : "") + std::to_string(r[i]);
  return out;
}

namespace {

struct Beat {
  bool seen = false;
  int64_t counter = -1;
  std::map<std::string, int64_t> groups;
  std::string last;
  int64_t entered(const std::string& g) const {
    auto it = groups.find(g);
    return it == groups.end() ? 0 : it->second;
  }
};
using Beats = std::map<int, Beat>;

std::string key(int rank) { return "trainscope/alive/" + std::to_string(rank); }

}  // namespace

// What the heartbeat thread and the diagnosis threads share; either may outlive the Watch.
struct Watch::State {
  int rank = 0;
  c10::intrusive_ptr<c10d::TCPStore> store;
  std::mutex store_mu;  // one request at a time on store
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;     // stop() was called
  bool exited = false;   // the heartbeat thread has returned
  int64_t beats = 0;
  std::map<std::string, int64_t> entered;
  std::string last;
  std::atomic<bool> silent{false};  // the store did not answer a diagnosis
  std::atomic<bool> broken{false};  // a collective or store access failed (markBroken)

  // "COUNTER\nGROUP=N GROUP=N …\nLAST"
  void publish() {
    std::string v;
    {
      std::lock_guard<std::mutex> lock(mu);
      v = std::to_string(++beats) + "\n";
      for (const auto& [g, n] : entered) v += g + "=" + std::to_string(n) + " ";
      v += "\n" + last;
    }
    std::lock_guard<std::mutex> lock(store_mu);
    store->set(key(rank), std::vector<uint8_t>(v.begin(), v.end()));
  }

  Beat read(int q) {
    Beat b;
    std::vector<uint8_t> raw;
    {
      std::lock_guard<std::mutex> lock(store_mu);  // the heartbeat thread shares the connection
      if (!store->check({key(q)})) return b;
      raw = store->get(key(q));
    }
    std::istringstream in(std::string(raw.begin(), raw.end()));
    std::string line;
    b.seen = true;
    if (std::getline(in, line)) b.counter = std::atoll(line.c_str());
    if (std::getline(in, line)) {
      std::istringstream groups(line);
      for (std::string kv; groups >> kv;)
        if (auto eq = kv.find('='); eq != std::string::npos)
          b.groups[kv.substr(0, eq)] = std::atoll(kv.c_str() + eq + 1);
    }
    std::getline(in, b.last);
    return b;
  }

  void run() {
    std::unique_lock<std::mutex> lock(mu);
    while (!cv.wait_for(lock, kBeat, [this] { return done; })) {
      lock.unlock();
      try {
        publish();
      } catch (...) {
        break;  // the store is gone (rank 0 ended or failed): nothing more to tell
      }
      lock.lock();
    }
    if (!lock.owns_lock()) lock.lock();
    exited = true;
    cv.notify_all();
  }
};

Watch::Watch(const RankEnv& env, int rank) : s_(std::make_shared<State>()) {
  s_->rank = rank;
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(env.master_port);
  so.isServer = false;
  so.waitWorkers = false;
  so.timeout = kStoreTimeout;
  // Connecting and the first beat are bounded too: rank 0 may be stopped already.
  const auto bound = 2 * std::chrono::milliseconds(kStoreTimeout) + kBeat;
  auto connected = withDeadline<bool>(
      [s = s_, addr = env.master_addr, so] {
        s->store = c10::make_intrusive<c10d::TCPStore>(addr, so);
        s->publish();
        return true;
      },
      bound);
  if (!connected) throw std::runtime_error(silentStoreClause(bound));
  thread_ = std::thread([s = s_] {
    tracer::nameThread("comm watchdog");
    s->run();
  });
}

Watch::~Watch() { stop(); }

void Watch::stop() {
  if (!thread_.joinable()) return;
  bool exited = false;
  {
    std::unique_lock<std::mutex> lock(s_->mu);
    s_->done = true;
    s_->cv.notify_all();
    // A heartbeat blocked on a stopped rank 0 never returns: it is left behind (it owns its state).
    exited = s_->cv.wait_for(lock, kStoreTimeout, [this] { return s_->exited; });
  }
  if (exited) thread_.join();
  else thread_.detach();
}

void Watch::entered(const std::string& group, const char* op, int64_t seq) {
  std::lock_guard<std::mutex> lock(s_->mu);
  s_->entered[group] = seq + 1;
  s_->last = std::string(op) + " #" + std::to_string(seq) + " of group " + group;
}

bool Watch::storeSilent() const { return s_->silent; }
void Watch::markBroken() { s_->broken = true; }
bool Watch::broken() const { return s_->broken; }

std::string Watch::silentStoreClause(std::chrono::milliseconds waited) {
  return "rank 0 (which hosts the store) did not answer within " +
         std::to_string((waited.count() + 999) / 1000) + " s: stopped or hung";
}

std::string Watch::whoIsMissing(const std::string& group, const std::vector<int>& members, int64_t seq) {
  if (s_->silent) return silentStoreClause(kDiagnosis);
  std::optional<std::pair<Beats, Beats>> reads;
  try {
    reads = withDeadline<std::pair<Beats, Beats>>(
        [s = s_, members] {
          std::pair<Beats, Beats> r;
          for (int q : members)
            if (q != s->rank) r.first[q] = s->read(q);
          std::this_thread::sleep_for(4 * kBeat);  // long enough for every live rank to beat again
          for (int q : members)
            if (q != s->rank) r.second[q] = s->read(q);
          return r;
        },
        kDiagnosis);
  } catch (const std::exception&) {
    reads.reset();  // the store failed to answer (its own timeout): the same finding
  }
  if (!reads) {
    s_->silent = true;
    return silentStoreClause(kDiagnosis);
  }
  auto& [before, after] = *reads;
  std::vector<int> silent, behind;
  std::string where;
  for (const auto& [q, b] : after) {
    if (!b.seen || b.counter == before[q].counter) {
      silent.push_back(q);
    } else if (seq >= 0 && b.entered(group) <= seq) {
      behind.push_back(q);
      where += (where.empty() ? "" : "; ") + std::string("rank ") + std::to_string(q) +
               "'s last collective: " + (b.last.empty() ? "none yet" : b.last);
    }
  }
  std::string out;
  if (!silent.empty())
    out = std::string("rank") + (silent.size() > 1 ? "s " : " ") + joinRanks(silent) +
          (silent.size() > 1 ? " show" : " shows") + " no sign of life (no heartbeat for " +
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(4 * kBeat).count()) +
          " ms): stopped or hung";
  if (!behind.empty())
    out += std::string(out.empty() ? "" : "; ") + "rank" + (behind.size() > 1 ? "s " : " ") + joinRanks(behind) +
           (behind.size() > 1 ? " are" : " is") + " alive but did not arrive (" + where + ")";
  return out;
}

}  // namespace trainscope::runtime
