// row_io.h — each row type bound to and read from its table, in the column order of schema.cpp
// (internal to rundb: the writer, the reader and import use it).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainscope/rundb/rows.h"
#include "trainscope/rundb/schema.h"
#include "trainscope/rundb/sqlite.h"

namespace trainscope::rundb::io {

// Every row of `strings` (id, text). The one place that reads that table (reader.cpp).
std::vector<std::pair<int64_t, std::string>> loadStrings(Database& db);

inline std::optional<int64_t> optId(int64_t v) { return v >= 0 ? std::optional<int64_t>(v) : std::nullopt; }
inline std::optional<int64_t> optName(StringId v) {
  return v == kNoString ? std::nullopt : std::optional<int64_t>(v);
}
inline StringId nameAt(const Statement& s, int i) { return s.columnIsNull(i) ? kNoString : StringId(s.columnInt(i)); }
inline int64_t idAt(const Statement& s, int i) { return s.columnIsNull(i) ? -1 : s.columnInt(i); }

template <class Row>
struct RowIo;

template <>
struct RowIo<Step> {
  static constexpr const char* kTable = "steps";
  static void bind(Statement& s, int b, const Step& r) {
    s.bindFrom(b, r.rank, r.step, r.loss_recorded ? std::optional<double>(r.loss) : std::nullopt, r.lr, r.grad_norm, r.loss_scale, r.skipped, r.tokens, r.start_ns,
               r.step_time_ns, r.tokens_per_s, r.model_flops, r.hw_flops, r.mfu, r.hfu, r.peak_bytes, r.param_bytes,
               r.grad_bytes, r.optim_bytes, r.activation_bytes);
  }
  static Step read(const Statement& s) {
    Step r;
    r.rank = s.columnInt(0);
    r.step = s.columnInt(1);
    r.loss_recorded = s.columnType(2) != Statement::Type::Null;
    r.loss = r.loss_recorded ? s.columnDouble(2) : 0;
    r.lr = s.columnDouble(3);
    r.grad_norm = s.columnDouble(4);
    r.loss_scale = s.columnDouble(5);
    r.skipped = s.columnInt(6) != 0;
    r.tokens = s.columnInt(7);
    r.start_ns = s.columnInt(8);
    r.step_time_ns = s.columnInt(9);
    r.tokens_per_s = s.columnDouble(10);
    r.model_flops = s.columnDouble(11);
    r.hw_flops = s.columnDouble(12);
    r.mfu = s.columnOptDouble(13);
    r.hfu = s.columnOptDouble(14);
    r.peak_bytes = s.columnInt(15);
    r.param_bytes = s.columnInt(16);
    r.grad_bytes = s.columnInt(17);
    r.optim_bytes = s.columnInt(18);
    r.activation_bytes = s.columnInt(19);
    return r;
  }
};

template <>
struct RowIo<Range> {
  static constexpr const char* kTable = "ranges";
  static void bind(Statement& s, int b, const Range& r) {
    s.bindFrom(b, r.rank, r.tid, r.start_ns, r.end_ns, r.name, r.domain, r.depth, r.kind);
  }
  static Range read(const Statement& s) {
    return Range{s.columnInt(2), s.columnInt(3), nameAt(s, 4), nameAt(s, 5), s.columnInt(1),
                 int32_t(s.columnInt(6)), int32_t(s.columnInt(7)), s.columnInt(0)};
  }
};

template <>
struct RowIo<GpuAnnotation> {
  static constexpr const char* kTable = "gpu_annotations";
  static void bind(Statement& s, int b, const GpuAnnotation& r) {
    s.bindFrom(b, r.rank, r.device, r.stream, r.start_ns, r.end_ns, r.name, r.domain);
  }
  static GpuAnnotation read(const Statement& s) {
    return GpuAnnotation{s.columnInt(3), s.columnInt(4), s.columnInt(1), s.columnInt(2), nameAt(s, 5), nameAt(s, 6),
                         s.columnInt(0)};
  }
};

template <>
struct RowIo<HostOp> {
  static constexpr const char* kTable = "host_ops";
  static void bind(Statement& s, int b, const HostOp& r) {
    s.bindFrom(b, r.rank, r.tid, r.start_ns, r.end_ns, r.name, r.seq, optName(r.shapes));
  }
  static HostOp read(const Statement& s) {
    return HostOp{s.columnInt(2), s.columnInt(3), nameAt(s, 4), s.columnInt(1), idAt(s, 5), nameAt(s, 6),
                  s.columnInt(0)};
  }
};

template <>
struct RowIo<Kernel> {
  static constexpr const char* kTable = "kernels";
  static void bind(Statement& s, int b, const Kernel& r) {
    s.bindFrom(b, r.rank, r.device, r.stream, r.start_ns, r.end_ns, optId(r.correlation), r.name, r.grid[0],
               r.grid[1], r.grid[2], r.block[0], r.block[1], r.block[2], r.registers, r.shared_bytes,
               optId(r.collective_seq));
  }
  static Kernel read(const Statement& s) {
    Kernel k;
    k.rank = s.columnInt(0);
    k.device = s.columnInt(1);
    k.stream = s.columnInt(2);
    k.start_ns = s.columnInt(3);
    k.end_ns = s.columnInt(4);
    k.correlation = idAt(s, 5);
    k.name = nameAt(s, 6);
    for (int i = 0; i < 3; ++i) k.grid[i] = int32_t(s.columnInt(7 + i)), k.block[i] = int32_t(s.columnInt(10 + i));
    k.registers = int32_t(s.columnInt(13));
    k.shared_bytes = int32_t(s.columnInt(14));
    k.collective_seq = idAt(s, 15);
    return k;
  }
};

template <>
struct RowIo<Memcpy> {
  static constexpr const char* kTable = "memcpy";
  static void bind(Statement& s, int b, const Memcpy& r) {
    s.bindFrom(b, r.rank, r.device, r.stream, r.start_ns, r.end_ns, optId(r.correlation), r.kind, r.bytes);
  }
  static Memcpy read(const Statement& s) {
    return Memcpy{s.columnInt(3), s.columnInt(4), s.columnInt(1), s.columnInt(2), idAt(s, 5),
                  int32_t(s.columnInt(6)), s.columnInt(7), s.columnInt(0)};
  }
};

template <>
struct RowIo<Memset> {
  static constexpr const char* kTable = "memset";
  static void bind(Statement& s, int b, const Memset& r) {
    s.bindFrom(b, r.rank, r.device, r.stream, r.start_ns, r.end_ns, optId(r.correlation), r.bytes, r.value);
  }
  static Memset read(const Statement& s) {
    return Memset{s.columnInt(3), s.columnInt(4), s.columnInt(1), s.columnInt(2), idAt(s, 5), s.columnInt(6),
                  int32_t(s.columnInt(7)), s.columnInt(0)};
  }
};

template <>
struct RowIo<ApiCall> {
  static constexpr const char* kTable = "api_calls";
  static void bind(Statement& s, int b, const ApiCall& r) {
    s.bindFrom(b, r.rank, r.tid, r.start_ns, r.end_ns, optId(r.correlation), r.name, r.kind);
  }
  static ApiCall read(const Statement& s) {
    return ApiCall{s.columnInt(2), s.columnInt(3), s.columnInt(1), nameAt(s, 5), idAt(s, 4),
                   int32_t(s.columnInt(6)), s.columnInt(0)};
  }
};

template <>
struct RowIo<Counter> {
  static constexpr const char* kTable = "counters";
  static void bind(Statement& s, int b, const Counter& r) { s.bindFrom(b, r.rank, r.ts_ns, r.name, r.value); }
  static Counter read(const Statement& s) {
    return Counter{s.columnInt(1), nameAt(s, 2), s.columnDouble(3), s.columnInt(0)};
  }
};

template <>
struct RowIo<Collective> {
  static constexpr const char* kTable = "collectives";
  static void bind(Statement& s, int b, const Collective& r) {
    // A cut call has no bandwidth: NULL, not the 0 that a zero duration stores.
    const std::optional<double> algbw = r.cut ? std::nullopt : std::optional<double>(r.algbw());
    const std::optional<double> busbw = r.cut ? std::nullopt : std::optional<double>(r.busbw());
    s.bindFrom(b, r.rank, r.op, r.group, r.group_size, r.seq, r.bytes, r.start_ns, r.end_ns, algbw, busbw, r.cut);
  }
  static Collective read(const Statement& s) {
    Collective c;
    c.rank = s.columnInt(0);
    c.op = s.columnText(1);
    c.group = s.columnText(2);
    c.group_size = s.columnInt(3);
    c.seq = s.columnInt(4);
    c.bytes = s.columnInt(5);
    c.start_ns = s.columnInt(6);
    c.end_ns = s.columnInt(7);
    c.cut = s.columnInt(10) != 0;
    return c;
  }
};

template <>
struct RowIo<ThreadName> {
  static constexpr const char* kTable = "threads";
  static void bind(Statement& s, int b, const ThreadName& r) {
    s.bindFrom(b, r.rank, r.kind, r.device, r.tid, optName(r.name), r.sort_index);
  }
  static ThreadName read(const Statement& s) {
    return ThreadName{int32_t(s.columnInt(1)), s.columnInt(2), s.columnInt(3), nameAt(s, 4), s.columnOptInt(5),
                      s.columnInt(0)};
  }
};

template <>
struct RowIo<RankInfo> {
  static constexpr const char* kTable = "ranks";
  static void bind(Statement& s, int b, const RankInfo& r) {
    s.bindFrom(b, r.rank, r.host, r.pid, r.device, r.clock_offset_ns, r.offset_start_ns, r.offset_end_ns, r.exit_status,
               r.error.empty() ? std::optional<std::string>() : std::optional<std::string>(r.error));
  }
  static RankInfo read(const Statement& s) {
    RankInfo r;
    r.rank = s.columnInt(0);
    r.host = s.columnText(1);
    r.pid = s.columnInt(2);
    r.device = s.columnText(3);
    r.clock_offset_ns = s.columnInt(4);
    r.offset_start_ns = s.columnOptInt(5);
    r.offset_end_ns = s.columnOptInt(6);
    r.exit_status = s.columnOptInt(7);
    r.error = s.columnText(8);  // NULL reads ""
    return r;
  }
};

template <>
struct RowIo<Drop> {
  static constexpr const char* kTable = "drops";
  static void bind(Statement& s, int b, const Drop& r) {
    s.bindFrom(b, r.rank, r.source, r.emitted, r.stored, r.dropped);
  }
  static Drop read(const Statement& s) {
    return Drop{s.columnInt(0), s.columnText(1), s.columnInt(2), s.columnInt(3), s.columnInt(4)};
  }
};

template <>
struct RowIo<WeightDigest> {
  static constexpr const char* kTable = "weight_digest";
  static void bind(Statement& s, int b, const WeightDigest& r) { s.bindFrom(b, r.name, r.sum, r.sumsq, r.abssum); }
  static WeightDigest read(const Statement& s) {
    return WeightDigest{s.columnText(0), s.columnDouble(1), s.columnDouble(2), s.columnDouble(3)};
  }
};

template <>
struct RowIo<ExpertLoad> {
  static constexpr const char* kTable = "expert_load";
  static void bind(Statement& s, int b, const ExpertLoad& r) {
    s.bindFrom(b, r.rank, r.step, r.layer, r.expert, r.tokens, r.dropped, r.capacity, r.aux_loss, r.z_loss);
  }
  static ExpertLoad read(const Statement& s) {
    return ExpertLoad{s.columnInt(0), s.columnInt(1), s.columnInt(2), s.columnInt(3),   s.columnInt(4),
                      s.columnInt(5), s.columnInt(6), s.columnDouble(7), s.columnDouble(8)};
  }
};

template <>
struct RowIo<Checkpoint> {
  static constexpr const char* kTable = "checkpoints";
  static void bind(Statement& s, int b, const Checkpoint& r) { s.bindFrom(b, r.step, r.seconds, r.bytes, r.path); }
  static Checkpoint read(const Statement& s) {
    return Checkpoint{s.columnInt(0), s.columnDouble(1), s.columnInt(2), s.columnText(3)};
  }
};

template <>
struct RowIo<Fp8Scale> {
  static constexpr const char* kTable = "fp8_scales";
  static void bind(Statement& s, int b, const Fp8Scale& r) {
    s.bindFrom(b, r.rank, r.step, r.tensor, r.role, r.amax, r.scale);
  }
  static Fp8Scale read(const Statement& s) {
    return Fp8Scale{s.columnInt(0), s.columnInt(1), s.columnText(2), s.columnText(3), s.columnDouble(4),
                    s.columnDouble(5)};
  }
};

// "SELECT <every column> FROM <table>" for a row type.
// SELECT of every column of Row's table, as a file of schema `version` holds them (selectList).
template <class Row>
std::string selectAll(int version = kSchemaVersion) {
  const Table& t = table(RowIo<Row>::kTable);
  return "SELECT " + selectList(t, version) + " FROM " + t.name;
}

}  // namespace trainscope::rundb::io
