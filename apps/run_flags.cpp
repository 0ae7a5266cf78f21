// run_flags.cpp — see run_flags.h.
#include "run_flags.h"

#include <functional>
#include <sstream>
#include <type_traits>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/runconfig/fields.h"

namespace trainscope::apps {

namespace rt = trainscope::runconfig;

namespace {

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};

// Adds each field of the list as a flag that writes into `c`. Numbers and strings go through
// CLI11's own conversion (its errors name the flag); enums, ZeRO stages, byte counts and the seed
// through runconfig's parsers, as text (UserError naming the flag).
class FieldFlags {
 public:
  FieldFlags(CLI::App* run, rt::TrainConfig& c) : run_(run), c_(c) {}

  template <class T>
  void operator()(const rt::Field& f, T rt::TrainConfig::*m) {
    T& v = c_.*m;
    const bool show = f.has(rt::Field::kShowDefault);
    const std::string flag = f.flag;
    if constexpr (std::is_same_v<T, bool>) {
      if (f.has(rt::Field::kNegated)) run_->add_flag_callback(flag, [&v] { v = false; }, f.help);
      else run_->add_flag(flag, v, f.help);
    } else if constexpr (std::is_same_v<T, uint64_t>) {
      text(f, [&v, flag](const std::string& s) { v = rt::parseSeed(s, flag); }, show ? rt::argText(v) : "");
    } else if constexpr (IsOptional<T>::value) {
      using U = typename T::value_type;
      if constexpr (std::is_integral_v<U>)
        text(f, [&v, flag](const std::string& s) { v = rt::parseIntegerAs<U>(s, flag); }, "", "INT");
      else
        run_->add_option_function<U>(flag, [&v](const U& x) { v = x; }, f.help);
    } else if constexpr (std::is_same_v<T, rt::ZeroStage>) {
      text(f, [&v, flag](const std::string& s) { v = rt::zeroStage(rt::parseIntegerAs<int64_t>(s, flag), flag); },
           show ? rt::argText(v) : "", "INT");
    } else if constexpr (std::is_same_v<T, rt::PipelineSchedule>) {  // "interleaved" sets the virtual stages too
      rt::TrainConfig& c = c_;  // (this binder is a temporary: the callback holds the config itself)
      CLI::App* app = run_;  // --virtual-stages is read first (the list's order): its count says it was given
      text(f, [&c, flag, app](const std::string& s) { rt::parseScheduleInto(s, flag, c, app->count("--virtual-stages") > 0); },
           show ? rt::argText(v) : "");
    } else if constexpr (std::is_enum_v<T>) {
      text(f, [&v, flag](const std::string& s) { rt::parseInto(s, flag, v); }, show ? rt::argText(v) : "");
    } else {
      bindValue(f, v, show);
    }
  }

 private:
  // A flag whose value is text for `parse`; `shown` is the default the help shows ("" none).
  void text(const rt::Field& f, std::function<void(const std::string&)> parse, const std::string& shown,
            const std::string& type = "TEXT") {
    CLI::Option* o = run_->add_option_function<std::string>(f.flag, std::move(parse), f.help);
    o->type_name(type);
    if (!shown.empty()) o->default_str(shown);
  }

  // Integers go through parseInteger, not CLI11: its conversion saturates past the type's range
  // (--steps 9223372036854775808 ran as INT64_MAX); out of range is refused naming the flag.
  template <class T>
  void bindValue(const rt::Field& f, T& v, bool show) {
    const std::string flag = f.flag;
    if constexpr (std::is_same_v<T, int64_t>) {
      if (f.has(rt::Field::kBytes))
        return text(f, [&v, flag](const std::string& s) { v = rt::parseBytes(s, flag); }, "");
    }
    if constexpr (std::is_integral_v<T>) {
      text(f, [&v, flag](const std::string& s) { v = rt::parseIntegerAs<T>(s, flag); }, show ? rt::argText(v) : "",
           "INT");
    } else {
      CLI::Option* o = run_->add_option(f.flag, v, f.help);
      if (show) o->capture_default_str();
    }
  }

  CLI::App* run_;
  rt::TrainConfig& c_;
};

// The text of a --config file (UserError naming --config when it is not a readable regular file).
std::string readConfigFile(const std::string& file) {
  return files::readTextFile(file, "--config", "pass a config JSON file");
}

}  // namespace

void addRunFlags(CLI::App* run, RunFlags& f) {
  run->add_option("--config", f.config_file,
                  "a config JSON (the \"config\" object of `run --json`, or the whole line); flags on the command line override it");
  rt::visitFields(FieldFlags(run, f.cfg));
  // Where the run is recorded (RunOutput) and what it prints: not part of the config.
  run->add_option("--out", f.out.out, "run database (SQLite) to write");
  run->add_flag("--overwrite", f.out.overwrite, "replace --out if it is an earlier run database");
  run->add_option("--trace", f.out.trace, "record a trace into this run database (implies --out)");
  run->add_option_function<std::string>(
         "--trace-level", [&f](const std::string& s) { f.out.trace_level = rt::parseTraceLevel(s, "--trace-level"); },
         "steps|ranges|ops|all")
      ->default_str(rt::toString(f.out.trace_level));
  run->add_flag("--trace-shapes", f.out.trace_shapes, "record LibTorch op input shapes (ops level)");
  run->add_option("--save", f.out.save,
                  "write a checkpoint here at the end (Hugging Face layout plus trainscope/: docs/checkpoints.md)");
  run->add_option_function<std::string>(
         "--save-every", [&f](const std::string& s) { f.out.save_every = rt::parseIntegerAs<int64_t>(s, "--save-every"); },
         "also write the checkpoint every N steps (replacing the previous one)")
      ->type_name("INT");
  run->add_option_function<std::string>(
         "--save-shard-size", [&f](const std::string& s) { f.out.save_shard_bytes = rt::parseBytes(s, "--save-shard-size"); },
         "weights past this size are split into model-0000K-of-0000N.safetensors with an index (default 5G)");
  run->add_option("--resume", f.out.resume, "continue the run saved in this checkpoint folder (same flags, --steps counts from the start)");
  run->add_option("--init-from", f.out.init_from,
                  "start from the weights of this checkpoint folder (Hugging Face layout) with a fresh optimizer");
  run->add_option("--dump-logits", f.out.dump_logits,
                  "testing: write the logits of the first step's first micro-batch to this new safetensors file "
                  "(one process; the transformers oracle compares them)");
  run->add_flag("--json", f.json, "print one JSON summary line at the end");
  run->add_flag("-q,--quiet", f.quiet, "no banner, per-step lines or done line");
}

std::vector<std::string> expandConfigFlag(const std::vector<std::string>& argv) {
  std::vector<std::string> out;
  for (size_t i = 0; i + 1 < argv.size(); ++i)  // "--lr ''" would otherwise read as 0
    if (argv[i].rfind("--", 0) == 0 && argv[i].size() > 2 && argv[i + 1].empty())
      throw UserError(argv[i], "is empty", "give it a value");
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string file;
    if (argv[i] == "--config") {
      if (i + 1 >= argv.size()) throw UserError("--config", "needs a file", "pass --config FILE.json");
      file = argv[++i];
    } else if (argv[i].rfind("--config=", 0) == 0) {
      file = argv[i].substr(9);
    } else {
      out.push_back(argv[i]);
      continue;
    }
    // The file's flags go first: flags written after them on the command line win.
    std::vector<std::string> flags = rt::toArgs(rt::runSpecFromJson(readConfigFile(file), file));
    // A batch split given on the command line replaces the file's (gbs and ga are one choice).
    bool user_batch = false;
    for (const auto& a : argv)
      for (const char* f : {"--gbs", "--ga"})
        if (a == f || a.rfind(std::string(f) + "=", 0) == 0) user_batch = true;
    if (user_batch)
      for (size_t k = 0; k + 1 < flags.size(); ++k)
        if (flags[k] == "--gbs" || flags[k] == "--ga") flags.erase(flags.begin() + long(k), flags.begin() + long(k) + 2);
    const size_t at = out.size() >= 2 ? 2 : out.size();  // after "<exe> run"
    out.insert(out.begin() + long(at), flags.begin(), flags.end());
  }
  return out;
}

std::optional<rt::RunSpec> configOnly(const std::vector<std::string>& argv) {
  std::string file;
  if (argv.size() == 4 && argv[1] == "run" && argv[2] == "--config") file = argv[3];
  else if (argv.size() == 3 && argv[1] == "run" && argv[2].rfind("--config=", 0) == 0) file = argv[2].substr(9);
  if (file.empty()) return std::nullopt;  // not that form (or an empty name, which the flags path refuses)
  return rt::runSpecFromJson(readConfigFile(file), file);
}

}  // namespace trainscope::apps
