// trainscope/tracer/cupti_source.h — GPU activity from CUPTI into the tracer.
//
// Kernels (concurrent), memcpy, memset, runtime and driver API calls (with correlation ids, so a
// launch joins its kernel), and NVTX ranges of other libraries seen through CUPTI's marker activity
// (domain "nvtx/<domain>"; the runtime's own ranges, already recorded in-process, are skipped).
// NCCL kernels are tied to their collective when shards merge (merge.h). An API call's (and a marker's)
// thread is the tracer's number of the thread that made it (thread_names.h: threadIdOf), so it sits
// on that thread's row and every such thread has a `threads` row with a name. CUPTI is reached only through
// CuptiApi, whose methods are virtual: the real one (cupti_source.cpp) dlopens libcupti at run time
// — so a binary without a driver or without CUPTI still starts —, and tests feed CuptiSource
// hand-built activity records without a GPU (as libkineto does).
//
// Buffers: CUPTI asks for buffers and hands them back full; at most kMaxBuffers (8 MiB each) are
// outstanding. Past that CUPTI is given none and drops records, which it counts: those counts go to
// the tracer's drop table with the rest. Without a driver it reports itself unavailable in one line
// and the host sources carry on.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "trainscope/tracer/source.h"

namespace trainscope::tracer {

class Tracer;
class CuptiSource;

class CuptiApi {
 public:
  virtual ~CuptiApi() = default;
  // Loads CUPTI and checks a device is usable; false with a reason otherwise.
  virtual bool available(std::string* why) = 0;
  // Registers the buffer callbacks (records go to `sink`) and enables the activity kinds.
  virtual bool enable(CuptiSource* sink, std::string* why) = 0;
  virtual void flush() = 0;  // hands back every buffer, complete or not
  virtual void disable() = 0;
  virtual uint64_t timestamp() = 0;  // CUPTI's clock, ns
  virtual std::string callbackName(int domain, uint32_t cbid) = 0;
  virtual int64_t droppedRecords() = 0;  // records CUPTI could not keep
  // Whether the records' thread ids are OS thread ids (gettid: enable() asks CUPTI for them, as
  // libkineto does), so that an API call lands on its thread's own row; false: CUPTI's default ids.
  virtual bool systemThreadIds() { return true; }
};

// The dlopen-based CuptiApi (an always-unavailable one in builds without the CUDA path).
std::unique_ptr<CuptiApi> makeCuptiApi();

class CuptiSource final : public TraceSource {
 public:
  static constexpr size_t kBufferBytes = size_t(8) << 20;
  static constexpr int kMaxBuffers = 64;

  explicit CuptiSource(std::unique_ptr<CuptiApi> api);
  ~CuptiSource() override;  // stop()

  const char* name() const override { return "cupti"; }
  TraceLevel minLevel() const override { return TraceLevel::All; }
  // Starts collecting into `t`; false (with the reason, printed once by the caller) when unavailable.
  bool start(Tracer& t, std::string* why) override;
  // Flushes CUPTI's buffers into the tracer and stops.
  void stop() override;

  // One activity record (a CUpti_Activity*, any supported kind). Public so the backend and tests
  // can feed it; unsupported kinds are ignored. Times are shifted from CUPTI's clock to the tracer's.
  void handleRecord(const void* record);
  void setClockOffset(int64_t ns) { clock_offset_ns_ = ns; }
  int64_t recordsHandled() const { return handled_; }

 private:
  Tracer* tracer_ = nullptr;
  std::unique_ptr<CuptiApi> api_;
  bool running_ = false;
  struct OpenMarker {
    int64_t start_ns;
    std::string name, domain;
    uint32_t tid;
  };
  std::mutex markers_mu_;
  std::unordered_map<uint32_t, OpenMarker> open_markers_;  // NVTX range id → its start
  int64_t clock_offset_ns_ = 0;
  int64_t handled_ = 0;
  // CUPTI's thread id → the tracer's thread number (threadIdOf, asked once per thread).
  uint32_t hostThread(uint32_t cupti_tid);
  std::mutex threads_mu_;
  std::unordered_map<uint32_t, uint32_t> threads_;
};

}  // namespace trainscope::tracer
