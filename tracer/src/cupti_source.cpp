// cupti_source.cpp — the one wrapper around CUPTI (see cupti_source.h).
#include "trainscope/tracer/cupti_source.h"

#include "trainscope/tracer/thread_names.h"
#include "trainscope/tracer/trace.h"

#ifdef TRAINSCOPE_HAVE_CUPTI
#include <cupti.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#endif

namespace trainscope::tracer {

using rundb::ApiKind;
using rundb::RangeKind;

CuptiSource::CuptiSource(std::unique_ptr<CuptiApi> api) : api_(std::move(api)) {}

CuptiSource::~CuptiSource() { stop(); }

bool CuptiSource::start(Tracer& t, std::string* why) {
  tracer_ = &t;
  if (!api_ || !api_->available(why)) return false;
  // CUPTI's clock → the tracer's (CLOCK_REALTIME), sampled once, as libkineto does.
  clock_offset_ns_ = nowNs() - int64_t(api_->timestamp());
  if (!api_->enable(this, why)) return false;
  running_ = true;
  return true;
}

void CuptiSource::stop() {
  if (!running_) return;
  running_ = false;
  api_->flush();
  api_->disable();
  // CUPTI does not say which kinds it lost; they are counted under kernels, by far the most.
  const int64_t lost = api_->droppedRecords();
  if (lost > 0) tracer_->countDropped(kKernels, lost);
}

uint32_t CuptiSource::hostThread(uint32_t cupti_tid) {
  std::lock_guard<std::mutex> lock(threads_mu_);
  auto it = threads_.find(cupti_tid);
  if (it != threads_.end()) return it->second;
  const bool os = !api_ || api_->systemThreadIds();
  const uint32_t n = threadIdOf(int64_t(cupti_tid), os,
                                std::string("cuda api, ") + (os ? "os tid " : "cupti thread ") + std::to_string(cupti_tid));
  threads_.emplace(cupti_tid, n);
  return n;
}

namespace {
bool isOwnRange(const std::string& name) {
  for (const char* n : {names::kStep, names::kMicroBatch, names::kForward, names::kBackward, names::kRecompute,
                        names::kLayer, names::kHead, names::kGradSync, names::kOptimizer, names::kPipelineSend,
                        names::kPipelineRecv})
    if (name == n) return true;
  return false;
}
}  // namespace

#ifndef TRAINSCOPE_HAVE_CUPTI

void CuptiSource::handleRecord(const void*) { (void)isOwnRange; }

namespace {
class NoCupti final : public CuptiApi {
 public:
  bool available(std::string* why) override {
    *why = "this build has no CUPTI (configure with the CUDA toolkit)";
    return false;
  }
  bool enable(CuptiSource*, std::string*) override { return false; }
  void flush() override {}
  void disable() override {}
  uint64_t timestamp() override { return 0; }
  std::string callbackName(int, uint32_t) override { return ""; }
  int64_t droppedRecords() override { return 0; }
};
}  // namespace

std::unique_ptr<CuptiApi> makeCuptiApi() { return std::make_unique<NoCupti>(); }

#else

void CuptiSource::handleRecord(const void* p) {
  const auto* rec = static_cast<const CUpti_Activity*>(p);
  const int64_t off = clock_offset_ns_;
  ++handled_;
  switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      tracer_->record(KernelEvent{int64_t(k->start) + off, int64_t(k->end) + off, k->deviceId, k->streamId,
                                 tracer_->intern(k->name ? k->name : "<unnamed kernel>"), int64_t(k->correlationId),
                                 {k->gridX, k->gridY, k->gridZ}, {k->blockX, k->blockY, k->blockZ},
                                 int32_t(k->registersPerThread), k->staticSharedMemory + k->dynamicSharedMemory});
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      tracer_->record(MemcpyEvent{int64_t(m->start) + off, int64_t(m->end) + off, m->deviceId, m->streamId,
                                 int64_t(m->correlationId), int32_t(m->copyKind), int64_t(m->bytes)});
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
      tracer_->record(MemsetEvent{int64_t(m->start) + off, int64_t(m->end) + off, m->deviceId, m->streamId,
                                 int64_t(m->correlationId), int64_t(m->bytes), int32_t(m->value)});
      break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(rec);
      const bool runtime = rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME;
      const std::string name =
          api_ ? api_->callbackName(runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, a->cbid) : "";
      tracer_->record(ApiEvent{int64_t(a->start) + off, int64_t(a->end) + off, hostThread(a->threadId),
                              tracer_->intern(name.empty() ? "cbid " + std::to_string(a->cbid) : name),
                              int64_t(a->correlationId), int32_t(runtime ? ApiKind::Runtime : ApiKind::Driver)});
      break;
    }
    case CUPTI_ACTIVITY_KIND_MARKER: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMarker2*>(rec);
      const uint32_t tid = m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? hostThread(m->objectId.pt.threadId) : 0;
      std::lock_guard<std::mutex> lock(markers_mu_);
      if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
        open_markers_[m->id] = {int64_t(m->timestamp) + off, m->name ? m->name : "", m->domain ? m->domain : "", tid};
      } else if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
        auto it = open_markers_.find(m->id);
        if (it == open_markers_.end()) break;
        const OpenMarker o = it->second;
        open_markers_.erase(it);
        if (o.domain.empty() && isOwnRange(o.name)) break;  // recorded in-process already
        tracer_->record(RangeEvent{o.start_ns, int64_t(m->timestamp) + off, tracer_->intern(o.name),
                                  tracer_->intern("nvtx/" + (o.domain.empty() ? std::string("default") : o.domain)),
                                  o.tid, 0, int32_t(RangeKind::StartEnd)});
      }
      break;
    }
    default:
      --handled_;
      break;
  }
}

namespace {

// libcupti entry points, resolved at run time.
struct CuptiFns {
  CUptiResult (*registerCallbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*flushAll)(uint32_t) = nullptr;
  CUptiResult (*nextRecord)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*getTimestamp)(uint64_t*) = nullptr;
  CUptiResult (*callbackName)(CUpti_CallbackDomain, uint32_t, const char**) = nullptr;
  CUptiResult (*numDropped)(CUcontext, uint32_t, size_t*) = nullptr;
  CUptiResult (*setThreadIdType)(CUpti_ActivityThreadIdType) = nullptr;  // optional
};

CuptiFns g_fns;
std::atomic<CuptiSource*> g_sink{nullptr};
std::atomic<int> g_outstanding{0};

void CUPTIAPI bufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;
  if (g_outstanding.load() >= CuptiSource::kMaxBuffers) {  // budget spent: CUPTI drops and counts
    *buffer = nullptr;
    *size = 0;
    return;
  }
  ++g_outstanding;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, CuptiSource::kBufferBytes));
  *size = *buffer ? CuptiSource::kBufferBytes : 0;
}

void CUPTIAPI bufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CuptiSource* sink = g_sink.load();
  CUpti_Activity* rec = nullptr;
  while (sink && valid > 0 && g_fns.nextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) sink->handleRecord(rec);
  std::free(buffer);
  --g_outstanding;
}

class DlCupti final : public CuptiApi {
 public:
  bool available(std::string* why) override {
    // CUPTI loads and even answers for its clock without a driver; a device is what matters.
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) {
      *why = "no CUDA driver (libcuda.so.1 not found)";
      return false;
    }
    auto cuInit = reinterpret_cast<int (*)(unsigned)>(dlsym(cuda, "cuInit"));
    auto cuDeviceGetCount = reinterpret_cast<int (*)(int*)>(dlsym(cuda, "cuDeviceGetCount"));
    int devices = 0;
    if (!cuInit || !cuDeviceGetCount || cuInit(0) != 0 || cuDeviceGetCount(&devices) != 0 || devices == 0) {
      *why = "the CUDA driver reports no usable device";
      return false;
    }
    for (const char* lib : {"libcupti.so.13", "libcupti.so.12", "libcupti.so"}) {
      handle_ = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
      if (handle_) break;
    }
    if (!handle_) {
      *why = "libcupti could not be loaded (put the CUDA toolkit's or the nvidia-cuda-cupti wheel's lib on LD_LIBRARY_PATH)";
      return false;
    }
    auto sym = [&](auto& fn, const char* name) { fn = reinterpret_cast<std::decay_t<decltype(fn)>>(dlsym(handle_, name)); return fn != nullptr; };
    if (!(sym(g_fns.registerCallbacks, "cuptiActivityRegisterCallbacks") && sym(g_fns.enable, "cuptiActivityEnable") &&
          sym(g_fns.disable, "cuptiActivityDisable") && sym(g_fns.flushAll, "cuptiActivityFlushAll") &&
          sym(g_fns.nextRecord, "cuptiActivityGetNextRecord") && sym(g_fns.getTimestamp, "cuptiGetTimestamp") &&
          sym(g_fns.callbackName, "cuptiGetCallbackName") && sym(g_fns.numDropped, "cuptiActivityGetNumDroppedRecords"))) {
      *why = "libcupti lacks an expected entry point";
      return false;
    }
    sym(g_fns.setThreadIdType, "cuptiSetThreadIdType");  // optional: without it, CUPTI's own thread ids
    uint64_t t = 0;
    if (g_fns.getTimestamp(&t) != CUPTI_SUCCESS) {
      *why = "CUPTI is not usable here (no CUDA driver or device)";
      return false;
    }
    return true;
  }
  bool enable(CuptiSource* sink, std::string* why) override {
    g_sink = sink;
    // OS thread ids (gettid) for the API records, as libkineto asks: the tracer knows its threads by them.
    system_tids_ = g_fns.setThreadIdType && g_fns.setThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM) == CUPTI_SUCCESS;
    if (g_fns.registerCallbacks(bufferRequested, bufferCompleted) != CUPTI_SUCCESS) {
      *why = "cuptiActivityRegisterCallbacks failed";
      return false;
    }
    for (CUpti_ActivityKind k : kKinds)
      if (g_fns.enable(k) != CUPTI_SUCCESS) {
        *why = "cuptiActivityEnable failed for kind " + std::to_string(int(k)) + " (no driver, or insufficient privileges)";
        return false;
      }
    return true;
  }
  void flush() override { g_fns.flushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); }
  void disable() override {
    for (CUpti_ActivityKind k : kKinds) g_fns.disable(k);
    g_sink = nullptr;
  }
  uint64_t timestamp() override {
    uint64_t t = 0;
    g_fns.getTimestamp(&t);
    return t;
  }
  std::string callbackName(int domain, uint32_t cbid) override {
    const char* n = nullptr;
    if (g_fns.callbackName(CUpti_CallbackDomain(domain), cbid, &n) != CUPTI_SUCCESS || !n) return "";
    return n;
  }
  int64_t droppedRecords() override {
    size_t n = 0;
    g_fns.numDropped(nullptr, 0, &n);
    return int64_t(n);
  }
  bool systemThreadIds() override { return system_tids_; }

 private:
  static constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                                  CUPTI_ACTIVITY_KIND_MEMSET,           CUPTI_ACTIVITY_KIND_RUNTIME,
                                                  CUPTI_ACTIVITY_KIND_DRIVER,           CUPTI_ACTIVITY_KIND_MARKER};
  void* handle_ = nullptr;
  bool system_tids_ = false;
};

}  // namespace

std::unique_ptr<CuptiApi> makeCuptiApi() { return std::make_unique<DlCupti>(); }

#endif

}  // namespace trainscope::tracer
