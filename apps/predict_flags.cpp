// predict_flags.cpp — see predict_flags.h. The flags of `trainscope predict` and the keys of a
// `predict --batch` line, both from visitPredictFields, with the same checks: a count is a whole
// number from its least to its most, a share lies in 0..1, a ZeRO stage is 0..3, a name one of its
// values.
#include "predict_flags.h"
#include "predict_inline.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cmath>
#include <type_traits>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "predict_command.h"
#include "trainscope/common/error.h"
#include "trainscope/common/json_text.h"
#include "trainscope/common/json_text.h"
#include "trainscope/common/near_key.h"

namespace trainscope::apps {

namespace rt = trainscope::runconfig;

namespace {

// What is wrong with `n` as a count from `least` to `most` ("" when nothing).
std::string countProblem(const std::string& n, bool whole, long long value, int64_t least, int64_t most) {
  if (!whole || value < least)
    return "must be a whole number of at least " + std::to_string(least) + ", not " + n;
  if (value > most)
    return "must be at most 2^" + std::to_string(int(std::log2(double(most)))) + " (" + std::to_string(most) + "), not " + n;
  return "";
}

// A count of the key's range (CLI11's PositiveNumber prints the range up to DBL_MAX).
CLI::Validator countOf(const std::string& key) {
  const int64_t least = leastOf(key), most = mostOf(key);
  return CLI::Validator(
      [least, most](std::string& v) -> std::string {
        long long n = 0;
        bool whole = false;
        try {
          size_t used = 0;
          n = std::stoll(v, &used);
          whole = used == v.size();
        } catch (const std::out_of_range&) {
          return countProblem(v, true, v[0] == '-' ? LLONG_MIN : LLONG_MAX, least, most);
        } catch (const std::exception&) {
        }
        return countProblem(v, whole, n, least, most);
      },
      least == 0 ? "INT>=0" : "INT>=1");
}

// A number for the double field `key` ("" when it is one): dp_overlap a share from 0 to 1, bucket_mb
// MiB above 0 (CLI::Range lets NaN through: every comparison with it is false; CLI11's
// PositiveNumber prints its range up to DBL_MAX).
std::string realProblem(const std::string& key, double x, const std::string& text) {
  if (key == "bucket_mb") return std::isfinite(x) && x > 0 ? "" : "must be a positive number of MiB, not " + text;
  return std::isfinite(x) && x >= 0 && x <= 1 ? "" : "must be a number from 0 to 1, not " + text;
}
CLI::Validator realOf(const std::string& key) {
  return CLI::Validator(
      [key](std::string& v) -> std::string {
        try {
          size_t used = 0;
          const double x = std::stod(v, &used);
          if (used == v.size()) return realProblem(key, x, v);
        } catch (const std::exception&) {
        }
        return realProblem(key, NAN, v);
      },
      key == "bucket_mb" ? "MiB>0" : "0..1");
}

// The values a name flag takes ({} for any: a workload, a cluster, a checkpointing mode … are
// checked where they are read, naming the flag).
std::vector<std::string> choicesOf(const std::string& key) {
  if (key == "framework") return {"trainscope", "megatron", "fsdp", "deepspeed"};
  if (key == "attention") return {"default", "unfused", "flash"};
  if (key == "reduce_dtype") return {"default", "fp32", "bf16", "fp16"};
  return {};
}

// Adds each field of the list to the predict subcommand, writing into `f`.
class FlagBinder {
 public:
  FlagBinder(CLI::App* c, PredictFlags& f) : c_(c), f_(f) {}

  template <class T>
  void operator()(const rt::Field& field, T PredictFlags::*m) {
    T& v = f_.*m;
    const std::string flag = field.flag, key = field.key;
    CLI::Option* o = nullptr;
    if constexpr (std::is_same_v<T, bool>) {
      c_->add_flag(flag, v, field.help);
      return;
    } else if constexpr (std::is_same_v<T, rt::ZeroStage>) {
      o = c_->add_option_function<int>(flag, [&v, flag](int s) { v = rt::zeroStage(s, flag); }, field.help)
              ->check(CLI::IsMember({"0", "1", "2", "3"}));
      o->default_str(rt::argText(v));
    } else if constexpr (std::is_same_v<T, rt::PipelineSchedule>) {
      PredictFlags& f = f_;
      CLI::App* app = c_;  // --virtual-stages is read first (the list's order): its count says it was given
      o = c_->add_option_function<std::string>(
          flag, [&f, flag, app](const std::string& s) { rt::parseScheduleInto(s, flag, f, app->count("--virtual-stages") > 0); },
          field.help);
      o->default_str(rt::argText(v));
    } else if constexpr (std::is_same_v<T, int64_t>) {
      o = c_->add_option(flag, v, field.help)->check(countOf(key));
    } else if constexpr (std::is_same_v<T, double>) {
      o = c_->add_option(flag, v, field.help)->check(realOf(key));
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      o = c_->add_option(flag, v, field.help)->delimiter(',');
    } else {
      o = c_->add_option(flag, v, field.help);
      if (const auto choices = choicesOf(key); !choices.empty()) o->check(CLI::IsMember(choices));
    }
    if (field.has(rt::Field::kShowDefault) && o->get_default_str().empty()) o->capture_default_str();
  }

 private:
  CLI::App* c_;
  PredictFlags& f_;
};

// Reads a batch line's keys into `f`, in the list's order (virtual_stages before pp_schedule, as the
// flags), each checked as its flag is; errors name "--batch line N: KEY".
class KeyReader {
 public:
  KeyReader(const nlohmann::json& j, std::string where, PredictFlags& f) : j_(j), where_(std::move(where)), f_(f) {}

  template <class T>
  void operator()(const rt::Field& field, T PredictFlags::*m) {
    const std::string key = field.key;
    if (!j_.contains(key)) return;
    const nlohmann::json& v = j_.at(key);
    const std::string at = where_ + ": " + key;
    T& into = f_.*m;
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) throw UserError(at, "must be true or false", "");
      into = v.get<bool>();
    } else if constexpr (std::is_same_v<T, rt::ZeroStage>) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 3)
        throw UserError(at, "must be 0, 1, 2 or 3, not " + jsonText(v), "");
      into = rt::ZeroStage(v.get<int>());
    } else if constexpr (std::is_same_v<T, rt::PipelineSchedule>) {
      rt::parseScheduleInto(text(at, v), at, f_, j_.contains("virtual_stages"));
    } else if constexpr (std::is_same_v<T, int64_t>) {
      // An unsigned past int64 would read back wrapped: it is past the most, and said so.
      const bool whole = v.is_number_integer();
      const long long n = !whole ? 0 : v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(LLONG_MAX) ? LLONG_MAX
                                                                                                        : v.get<int64_t>();
      if (const std::string why = countProblem(jsonText(v), whole, n, leastOf(key), mostOf(key)); !why.empty())
        throw UserError(at, why, "");
      into = int64_t(n);
    } else if constexpr (std::is_same_v<T, double>) {
      if (const std::string why = realProblem(key, v.is_number() ? v.get<double>() : NAN, jsonText(v)); !why.empty())
        throw UserError(at, why, "");
      into = v.get<double>();
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {  // "a.db,b.db" or ["a.db", "b.db"]
      into.clear();
      if (v.is_array())
        for (const auto& e : v) into.push_back(text(at, e));
      else
        for (std::string rest = text(at, v), one; !rest.empty(); rest.erase(0, one.size() + 1))
          if (!(one = rest.substr(0, rest.find(','))).empty()) into.push_back(one);
    } else {
      into = text(at, v);
      const auto choices = choicesOf(key);
      if (!choices.empty() && std::find(choices.begin(), choices.end(), into) == choices.end())
      {
        std::string list = choices[0];
        for (size_t i = 1; i < choices.size(); ++i) list += (i + 1 == choices.size() ? " or " : ", ") + choices[i];
        throw UserError(at, "must be " + list + ", not \"" + into + "\"", "");
      }
    }
  }

 private:
  static std::string text(const std::string& at, const nlohmann::json& v) {
    if (!v.is_string()) throw UserError(at, "must be a string", "");
    return v.get<std::string>();
  }
  const nlohmann::json& j_;
  std::string where_;
  PredictFlags& f_;
};

}  // namespace

CLI::App* addPredictCommand(CLI::App& app, PredictFlags*& f) {
  f = new PredictFlags();  // lives as long as the process
  CLI::App* c = app.add_subcommand("predict", "predict memory per rank and step time of one configuration (runs nothing)");
  // Counts are positive: 0 or a negative value is an error naming the flag (exit 2), never a default.
  visitPredictFields(FlagBinder(c, *f));
  c->add_option("--batch", f->batch,
                "JSON-lines file: one configuration per line (predict's flags as keys, _ for -); one JSON result per "
                "line; the other flags are each line's defaults");
  c->add_flag("--json", f->json, "one JSON object, bytes and seconds");
  c->add_option("--storage-gbps", f->storage_gbps,
                "price writing a `run --save` checkpoint at this storage bandwidth (GB/s): bytes / bandwidth")
      ->type_name("GB/s");
  return c;
}

std::vector<std::string> predictKeys() {
  std::vector<std::string> keys;
  visitPredictFields([&](const rt::Field& field, auto) { keys.push_back(field.key); });
  keys.push_back("storage_gbps");
  return keys;
}

std::string notJsonObjectProblem(const std::string& text) {
  try {
    (void)nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    std::string why = e.what();
    if (const size_t at = why.find("] "); at != std::string::npos) why = why.substr(at + 2);  // "[json.exception…] "
    // A line cut inside its object (the file's last, without its newline: an interrupted write).
    if (!jsonCutShort(e.byte, text.size(), e.what()).empty())
      return "ends inside its JSON object: the file is truncated (cut short) or unfinished (" + why + ")";
    for (const char* word : {"NaN", "Infinity"})
      if (text.find(word) != std::string::npos)
        return std::string("is not valid JSON: ") + word + " is not a JSON number (Python's json.dumps writes it for a "
               "float nan or inf) (" + why + ")";
    return "is not valid JSON (" + why + ")";
  }
  return "is not a JSON object";
}

std::string unknownKeyFix(const std::string& key, const std::vector<std::string>& known) {
  const auto near = keys::nearestKey(key, known);
  if (keys::closeTo(key, near)) return "did you mean \"" + near.first + "\"?";
  std::string list;
  for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
  return "use " + list;
}

PredictFlags flagsFromJson(const std::string& text, const PredictFlags& defaults, int64_t line) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  const std::string where = "--batch line " + std::to_string(line);
  if (!j.is_object()) throw UserError(where, notJsonObjectProblem(text), "one object of predict's flags per line");
  const std::vector<std::string> keys = predictKeys();  // any other key is refused by name
  for (const auto& [k, v] : j.items())
    if (std::find(keys.begin(), keys.end(), k) == keys.end())
      throw UserError(where + ": " + k, "is not a flag of predict", unknownKeyFix(k, keys));
  // "workload" and "cluster" may be the object itself (predict_inline.h): kept as its text, parsed by
  // the loader; anything else but a string is refused here, naming what the key takes.
  for (const char* key : {"workload", "cluster"}) {
    if (!j.contains(key) || j[key].is_string()) continue;
    if (!j[key].is_object())
      throw UserError(where + ": " + key, "must be a name, a JSON path or a JSON object, not " + jsonText(j[key]),
                      std::string("give the ") + key + "'s name or file, or its definition as an object");
    j[key] = inlineKey(j[key]);
  }
  PredictFlags f = defaults;
  f.batch.clear();
  visitPredictFields(KeyReader(j, where, f));
  // --storage-gbps is no part of the configuration (not in the list): a line prices its checkpoint's
  // write as the flag does, its value a number of GB/s (or the flag's text); checked by storageGbps.
  if (j.contains("storage_gbps")) {
    const nlohmann::json& v = j.at("storage_gbps");
    f.storage_gbps = v.is_string() ? v.get<std::string>() : jsonText(v);
    char* end = nullptr;
    const double gbps = v.is_number() ? v.get<double>() : v.is_string() ? std::strtod(f.storage_gbps.c_str(), &end) : NAN;
    if ((end && *end != '\0') || !(gbps > 0) || gbps > 1e9)  // storageGbps's bounds
      throw UserError(where + ": storage_gbps", "must be a positive number of GB/s, not " + jsonText(v),
                      "give the storage's write bandwidth, e.g. 2");
  }
  return f;
}

}  // namespace trainscope::apps
