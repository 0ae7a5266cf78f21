// forms.cpp — TrainConfig and RunSpec as JSON and as `trainscope run` flags. Each form walks the
// field list of fields.h; what is written here by hand is only what the list cannot say: the
// derived values of a resolved config, and the keys that older files use for a field.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>

#include "trainscope/common/error.h"
#include "trainscope/common/json_text.h"
#include "trainscope/common/near_key.h"
#include "trainscope/runconfig/fields.h"

namespace trainscope::runconfig {

std::string shortestDecimal(double v) {
  char b[40];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(b, sizeof(b), "%.*g", digits, v);
    if (std::strtod(b, nullptr) == v) break;
  }
  return b;
}

int64_t parseInteger(const std::string& text, const std::string& field, int64_t min, int64_t max,
                     const std::string& fix) {
  errno = 0;
  char* end = nullptr;
  long long v = 0;
  if (!text.empty() && !std::isspace(static_cast<unsigned char>(text[0]))) v = std::strtoll(text.c_str(), &end, 10);
  if (end == nullptr || end == text.c_str() || *end != '\0' || errno == ERANGE || v < min || v > max)
    throw UserError(field,
                    "\"" + text + "\" is not a whole number from " + std::to_string(min) + " to " + std::to_string(max),
                    fix);
  return v;
}

uint64_t parseSeed(const std::string& text, const std::string& field) {
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text[0] == '-' || text[0] == '+' || *end != '\0' || end == text.c_str() || errno == ERANGE)
    throw UserError(field, "\"" + text + "\" is not an integer from 0 to 18446744073709551615",
                    "pass e.g. --seed 1337");
  return v;
}

namespace {

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};

const TrainConfig& defaults() {
  static const TrainConfig d;
  return d;
}

// Whether a form leaves field `f` out: it is one of those written only when set, and is not.
template <class T>
bool leftOut(const Field& f, unsigned omit_flags, const T& v, const T& default_value) {
  return f.has(omit_flags) && v == default_value;
}

// What --workload takes to load this model again: its name when it came from the workloads folder,
// else the absolute path of the file it was read from.
std::string workloadSpec(const TrainConfig& c) {
  if (c.model.source.empty() || c.workload == c.model.name) return c.workload;
  std::error_code ec;
  const auto abs = std::filesystem::absolute(c.model.source, ec);
  return ec ? c.model.source : abs.string();
}

// The fields as a user gives them. In a resolved config the derived values stand in for what they
// came from: the model's file for the workload, the world for --nproc (under a launcher the
// environment's), the global batch and ga that resolve() computed.
TrainConfig asGiven(const TrainConfig& c) {
  TrainConfig g = c;
  if (c.global_batch > 0) {
    g.workload = workloadSpec(c);
    g.nproc = c.world;
    g.gbs = c.global_batch;
    g.ga = c.ga_steps;
  }
  return g;
}

template <class T>
nlohmann::json jsonOf(const T& v) {
  if constexpr (std::is_same_v<T, ZeroStage>)
    return stageNumber(v);
  else if constexpr (std::is_enum_v<T>)
    return toString(v);
  else
    return v;
}

// A JSON value as a field's type; nlohmann's type_error for a wrong type, UserError(field) for an
// unknown name or stage.
template <class T>
T valueOf(const nlohmann::json& j, const std::string& field) {
  if constexpr (IsOptional<T>::value) {
    return valueOf<typename T::value_type>(j, field);
  } else if constexpr (std::is_same_v<T, ZeroStage>) {
    return zeroStage(valueOf<int64_t>(j, field), field);
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    if (!j.is_number()) return j.get<T>();  // nlohmann's type_error: "has the wrong type"
    if (!j.is_number_integer()) throw UserError(field, "must be a whole number, got " + j.dump(), "see docs/config-reference.md");
    return parseSeed(j.dump(), field);  // a negative number is refused, not wrapped
  } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // nlohmann converts with a cast: 3e9 into an int wraps, 2.5 truncates. The number's text is read instead.
    if (!j.is_number()) return j.get<T>();  // nlohmann's type_error: "has the wrong type"
    if (!j.is_number_integer()) throw UserError(field, "must be a whole number, got " + j.dump(), "see docs/config-reference.md");
    return parseIntegerAs<T>(j.dump(), field);
  } else if constexpr (std::is_enum_v<T>) {
    T v{};
    parseInto(j.get<std::string>(), field, v);
    return v;
  } else {
    return j.get<T>();
  }
}

// A JSON object read key by key; errors name "--config SOURCE: KEY". Keys it is not asked for are
// ignored (the derived ones, and those of later versions).
class JsonFields {
 public:
  JsonFields(const nlohmann::json& j, std::string source, std::string prefix = "")
      : j_(j), source_(std::move(source)), prefix_(std::move(prefix)) {}
  std::string field(const std::string& key) const { return "--config " + source_ + ": " + prefix_ + key; }
  bool has(const char* key) const { return j_.contains(key); }
  template <class T>
  bool get(const char* key, T& into) const {
    if (!j_.contains(key)) return false;
    try {
      into = valueOf<T>(j_.at(key), field(key));
    } catch (const nlohmann::json::exception&) {
      throw UserError(field(key), "has the wrong type (" + jsonText(j_.at(key)) + ")", "see docs/config-reference.md");
    }
    return true;
  }

 private:
  const nlohmann::json& j_;
  std::string source_, prefix_;
};

nlohmann::json parseObject(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw UserError("--config", source + " is not valid JSON (" + jsonErrorText(e.what()) + jsonCutShort(e.byte, text.size(), e.what()) + ")",
                    "pass the \"config\" object that `trainscope run --json` prints, or the whole line");
  } catch (const nlohmann::json::exception& e) {
    throw UserError("--config", source + " is not valid JSON (" + jsonErrorText(e.what()) + ")",
                    "pass the \"config\" object that `trainscope run --json` prints, or the whole line");
  }
  if (!j.is_object())
    throw UserError("--config", source + " holds no JSON object",
                    "pass the \"config\" object of `trainscope run --json`");
  return j;
}

// The config in a parsed file: the object itself, or the "config" member of a whole --json line.
const nlohmann::json& configObject(const nlohmann::json& j) {
  return j.contains("config") && j["config"].is_object() ? j["config"] : j;
}

// A key no config has that is one or two edits from one it has ("stpes", "output.ovewrite") is
// refused naming the key it resembles: ignored, it would leave that setting at its default without a
// word. Other unknown keys (those of a later version) are ignored, as the derived ones are.
void refuseMisspeltKeys(const nlohmann::json& j, const std::vector<std::string>& known, const std::string& source,
                        const std::string& prefix) {
  for (const auto& [key, value] : j.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    const auto near = keys::nearestKey(key, known);
    if (!keys::closeTo(key, near)) continue;
    throw UserError("--config " + source + ": " + prefix + key,
                    "unknown key; did you mean \"" + near.first + "\"?" +
                        (j.contains(near.first) ? " (that key is set as well)" : ""),
                    "name it " + prefix + near.first + " (docs/config-reference.md)");
  }
}

void refuseMisspeltKeys(const nlohmann::json& whole, const std::string& source) {
  std::vector<std::string> known = {"workload", "n_layer", "n_head", "n_embd", "n_positions", "vocab_size",
                                    "world",    "dp",      "output", "quiet"};  // derived, and a RunSpec's
  visitFields([&](const Field& f, auto) { known.push_back(f.key); });
  const nlohmann::json& c = configObject(whole);
  refuseMisspeltKeys(c, known, source, "");
  const nlohmann::json& top = whole.contains("output") ? whole : c;
  if (top.contains("output") && top["output"].is_object())
    refuseMisspeltKeys(top["output"], {"out", "trace", "trace_level", "trace_shapes", "overwrite", "save", "save_every",
                                       "save_shard_bytes", "resume", "init_from"},
                       source, "output.");
}

TrainConfig configFrom(const JsonFields& in) {
  TrainConfig c;
  visitFields([&](const Field& f, auto m) {
    std::string schedule;  // by name: "interleaved" sets the virtual stages too
    if constexpr (std::is_same_v<std::decay_t<decltype(c.*m)>, PipelineSchedule>) {
      if (in.get(f.key, schedule)) parseScheduleInto(schedule, in.field(f.key), c, in.has("virtual_stages"));
    } else {
      in.get(f.key, c.*m);
    }
  });
  if (!in.has("workload_spec")) in.get("workload", c.workload);  // files written before workload_spec
  if (!in.has("nproc")) in.get("world", c.nproc);
  if (in.has("gbs")) c.ga.reset();  // one choice: a resolved config has both, and gbs = mbs x ga x dp
  return c;
}

nlohmann::json configJson(const TrainConfig& c) {
  TrainConfig g = asGiven(c);
  g.workload = workloadSpec(c);  // a workload file by its absolute path, resolved or not
  nlohmann::json j = nlohmann::json::object();
  visitFields([&](const Field& f, auto m) {
    const auto& v = g.*m;
    if (leftOut(f, Field::kOmitDefault, v, defaults().*m)) return;
    if constexpr (IsOptional<std::decay_t<decltype(v)>>::value) {
      if (v) j[f.key] = jsonOf(*v);
    } else {
      j[f.key] = jsonOf(v);
    }
  });
  // Derived (fromJson ignores them): the model's name and shape, the layout.
  j["workload"] = c.model.name.empty() ? c.workload : c.model.name;
  j["n_layer"] = c.model.n_layer;
  j["n_head"] = c.model.n_head;
  j["n_embd"] = c.model.n_embd;
  j["n_positions"] = c.model.n_positions;
  j["vocab_size"] = c.model.vocab_size;
  j["world"] = c.world;
  j["dp"] = c.dp;
  return j;
}

}  // namespace

std::string toJson(const TrainConfig& c) { return jsonText(configJson(c)); }

TrainConfig fromJson(const std::string& text, const std::string& source) {
  const nlohmann::json j = parseObject(text, source);
  refuseMisspeltKeys(j, source);
  return configFrom(JsonFields(configObject(j), source));
}

std::vector<std::string> toArgs(const TrainConfig& c) {
  TrainConfig g = asGiven(c);
  if (g.gbs) g.ga.reset();  // one choice: the global batch when it is known
  std::vector<std::string> a;
  visitFields([&](const Field& f, auto m) {
    const auto& v = g.*m;
    using T = std::decay_t<decltype(v)>;
    if (leftOut(f, Field::kOmitDefault | Field::kArgsOmitDefault, v, defaults().*m)) return;
    if constexpr (std::is_same_v<T, bool>) {
      if (v != f.has(Field::kNegated)) a.push_back(f.flag);  // a flag, given when it changes the default
    } else if constexpr (IsOptional<T>::value) {
      if (v) a.insert(a.end(), {f.flag, argText(*v)});
    } else if constexpr (std::is_same_v<T, PipelineSchedule>) {
      a.insert(a.end(), {f.flag, scheduleName(g)});  // "interleaved" with its --virtual-stages, written before
    } else {
      a.insert(a.end(), {f.flag, argText(v)});
    }
  });
  return a;
}

std::string toJson(const RunSpec& s) {
  nlohmann::json j = configJson(s.config);
  const RunOutput& o = s.output;
  j["output"] = {{"out", o.out},
                 {"trace", o.trace},
                 {"trace_level", toString(o.trace_level)},
                 {"trace_shapes", o.trace_shapes},
                 {"overwrite", o.overwrite}};
  if (!o.save.empty()) j["output"]["save"] = o.save;
  if (o.save_every) j["output"]["save_every"] = o.save_every;
  if (o.save_shard_bytes != RunOutput().save_shard_bytes) j["output"]["save_shard_bytes"] = o.save_shard_bytes;
  if (!o.resume.empty()) j["output"]["resume"] = o.resume;
  if (!o.init_from.empty()) j["output"]["init_from"] = o.init_from;
  j["quiet"] = s.quiet;
  return jsonText(j);
}

RunSpec runSpecFromJson(const std::string& text, const std::string& source) {
  const nlohmann::json j = parseObject(text, source);
  refuseMisspeltKeys(j, source);
  const JsonFields top(j, source);
  RunSpec s;
  s.config = configFrom(JsonFields(configObject(j), source));
  if (j.contains("output")) {
    if (!j["output"].is_object())
      throw UserError(top.field("output"), "must be an object (" + jsonText(j["output"]) + ")",
                      "see docs/config-reference.md");
    const JsonFields out(j["output"], source, "output.");
    RunOutput& o = s.output;
    out.get("out", o.out);
    out.get("trace", o.trace);
    out.get("trace_level", o.trace_level);
    out.get("trace_shapes", o.trace_shapes);
    out.get("overwrite", o.overwrite);
    out.get("save", o.save);
    out.get("save_every", o.save_every);
    out.get("save_shard_bytes", o.save_shard_bytes);
    out.get("resume", o.resume);
    out.get("init_from", o.init_from);
  }
  top.get("quiet", s.quiet);
  return s;
}

std::vector<std::string> toArgs(const RunSpec& s) {
  std::vector<std::string> a = toArgs(s.config);
  const RunOutput& o = s.output;
  if (!o.trace.empty()) a.insert(a.end(), {"--trace", o.trace});
  if (!o.out.empty() && o.out != o.trace) a.insert(a.end(), {"--out", o.out});  // the trace is the database
  a.insert(a.end(), {"--trace-level", toString(o.trace_level)});
  if (o.trace_shapes) a.push_back("--trace-shapes");
  if (o.overwrite) a.push_back("--overwrite");
  if (!o.save.empty()) a.insert(a.end(), {"--save", o.save});
  if (o.save_every) a.insert(a.end(), {"--save-every", std::to_string(o.save_every)});
  if (o.save_shard_bytes != RunOutput().save_shard_bytes)
    a.insert(a.end(), {"--save-shard-size", std::to_string(o.save_shard_bytes)});
  if (!o.resume.empty()) a.insert(a.end(), {"--resume", o.resume});
  if (!o.init_from.empty()) a.insert(a.end(), {"--init-from", o.init_from});
  if (s.quiet) a.push_back("-q");
  return a;
}

}  // namespace trainscope::runconfig
