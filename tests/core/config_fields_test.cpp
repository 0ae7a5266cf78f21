// config_fields_test.cpp — the field list (runconfig/fields.h) and what is generated from it: every
// field survives toJson → fromJson and toArgs → the `trainscope run` flags with a value other than
// its default; the run flags are the list's plus the output's; a RunSpec round-trips and a lone
// `run --config FILE` reads it straight; the ZeRO stage and the enums keep their text forms.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "../common/cli.h"
#include "run_flags.h"
#include "trainscope/common/error.h"
#include "trainscope/models/cluster.h"
#include "trainscope/runconfig/fields.h"

namespace rt = trainscope::runconfig;
namespace apps = trainscope::apps;
using trainscope::UserError;
using trainscope::testing::tempPath;

namespace {

// A value of field `f` other than its default `d`, that both text forms can carry.
template <class T>
T otherThan(const rt::Field& f, const T& d) {
  if constexpr (std::is_same_v<T, bool>) {
    return !d;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return "x" + d;  // not "-…": a flag's value may not look like a flag
  } else if constexpr (std::is_same_v<T, double>) {
    return d + 1.0 / 3.0;  // not a short decimal: the text forms must keep every bit
  } else if constexpr (std::is_same_v<T, std::optional<double>>) {
    return 2.0 / 3.0;
  } else if constexpr (std::is_same_v<T, std::optional<int64_t>>) {
    return 12;
  } else if constexpr (std::is_same_v<T, rt::ZeroStage>) {
    return rt::ZeroStage::Parameters;  // read and written; resolve() is what refuses it for now
  } else if constexpr (std::is_enum_v<T>) {
    for (int i = 1; i < 8; ++i)  // the next value that has a name
      if (std::string(rt::toString(T((int(d) + i) % 8))) != "?") return T((int(d) + i) % 8);
    return d;
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    return 18446744073709551557ull;  // the largest prime below 2^64: no double holds it
  } else {
    if constexpr (std::is_same_v<T, int64_t>)
      if (f.has(rt::Field::kBytes)) return int64_t(3) << 30;
    return T(d + 7);
  }
}

// `trainscope run ARGS` parsed as trainscope-train parses it.
apps::RunFlags parseRun(const std::vector<std::string>& args) {
  CLI::App app;
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  CLI::App* run = app.add_subcommand("run");
  apps::RunFlags f;
  apps::addRunFlags(run, f);
  std::vector<std::string> argv = {"run"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> reversed(argv.rbegin(), argv.rend());
  app.parse(reversed);
  return f;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& a : v) s += " " + a;
  return s;
}

std::string fieldOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.field() + " | " + e.what();
  }
  return "";
}

}  // namespace

TEST(ConfigFields, EveryFieldSurvivesJsonAndFlagsWithAValueOtherThanItsDefault) {
  int fields = 0;
  std::set<std::string> keys, flags;
  rt::visitFields([&](const rt::Field& f, auto m) {
    ++fields;
    EXPECT_TRUE(keys.insert(f.key).second) << "two fields write JSON key " << f.key;
    EXPECT_TRUE(flags.insert(f.flag).second) << "two fields have flag " << f.flag;
    rt::TrainConfig c;
    c.*m = otherThan(f, c.*m);
    ASSERT_FALSE(c.*m == rt::TrainConfig{}.*m) << f.key;
    const std::string json = rt::toJson(c);
    const rt::TrainConfig from_json = rt::fromJson(json, "test");
    EXPECT_TRUE(from_json.*m == c.*m) << f.key << ": " << json;
    EXPECT_EQ(rt::toJson(from_json), json) << f.key;
    const std::vector<std::string> args = rt::toArgs(c);
    const rt::TrainConfig from_args = parseRun(args).cfg;
    EXPECT_TRUE(from_args.*m == c.*m) << f.key << ":" << joined(args);
    EXPECT_EQ(rt::toJson(from_args), json) << f.key << ":" << joined(args);
  });
  // TrainConfig's user-settable members, all in the list (a new member: a line in visitFields, and here).
  EXPECT_EQ(fields, 46);
}

TEST(ConfigFields, TheRunFlagsAreTheListsAndTheOutputsWithTheirHelpAndDefaults) {
  CLI::App app;
  CLI::App* run = app.add_subcommand("run");
  apps::RunFlags f;
  apps::addRunFlags(run, f);
  std::set<std::string> listed;
  rt::visitFields([&](const rt::Field& field, auto) {
    listed.insert(field.flag);
    const CLI::Option* o = run->get_option(field.flag);
    EXPECT_EQ(o->get_description(), field.help) << field.flag;
    EXPECT_EQ(!o->get_default_str().empty(), field.has(rt::Field::kShowDefault)) << field.flag;
  });
  const std::set<std::string> outputs = {"--config", "--out", "--overwrite", "--trace", "--trace-level",
                                         "--trace-shapes", "--json", "--quiet", "--help",
                                         // checkpoints (docs/checkpoints.md)
                                         "--save", "--save-every", "--save-shard-size", "--resume", "--init-from",
                                         "--dump-logits"};
  for (const CLI::Option* o : run->get_options()) {
    const std::string name = o->get_lnames().empty() ? "" : "--" + o->get_lnames().front();
    EXPECT_TRUE(listed.count(name) || outputs.count(name)) << name << " is neither a field nor an output flag";
  }
  // The defaults the help shows, as before the list (users read them).
  for (const auto& [flag, shown] : std::vector<std::pair<const char*, const char*>>{
           {"--mbs", "4"}, {"--ckpt", "none"}, {"--zero", "0"}, {"--trace-level", "ranges"}, {"--lr", "0.0006"},
           {"--pp-schedule", "1f1b"}, {"--workload", "tiny"}, {"--seq", ""}, {"--seed", ""}})
    EXPECT_EQ(run->get_option(flag)->get_default_str(), shown) << flag;
}

TEST(ConfigFields, ARunSpecRoundTripsAndAPlainConfigIsOne) {
  rt::RunSpec s;
  s.config.workload = "tiny";
  s.config.steps = 3;
  s.config.zero = rt::ZeroStage::OptimizerStates;
  s.output.trace = "/tmp/x.db";
  s.output.trace_level = rt::TraceLevel::Ops;
  s.output.trace_shapes = true;
  s.output.overwrite = true;
  s.quiet = true;
  const std::string json = rt::toJson(s);
  const rt::RunSpec back = rt::runSpecFromJson(json, "spec.json");
  EXPECT_EQ(rt::toJson(back), json);
  EXPECT_EQ(back.output.trace, "/tmp/x.db");
  EXPECT_EQ(back.output.trace_level, rt::TraceLevel::Ops);
  EXPECT_TRUE(back.output.trace_shapes && back.output.overwrite && back.quiet);
  EXPECT_EQ(rt::toJson(rt::fromJson(json, "spec.json")), rt::toJson(s.config));  // the config part alone
  // As flags: the same spec.
  const apps::RunFlags f = parseRun(rt::toArgs(s));
  EXPECT_EQ(rt::toJson(f.cfg), rt::toJson(s.config));
  EXPECT_EQ(f.out.trace, s.output.trace);
  EXPECT_EQ(f.out.trace_level, rt::TraceLevel::Ops);
  EXPECT_TRUE(f.out.trace_shapes && f.out.overwrite && f.quiet);
  // A plain config is a spec with the default output.
  const rt::RunSpec plain = rt::runSpecFromJson(rt::toJson(s.config), "plain.json");
  EXPECT_TRUE(plain.output.out.empty() && plain.output.trace.empty() && !plain.quiet);
  EXPECT_EQ(plain.output.trace_level, rt::TraceLevel::Ranges);
  // Bad output values name the key.
  EXPECT_NE(fieldOf([] { rt::runSpecFromJson(R"({"output": {"trace_level": "loud"}})", "s.json"); })
                .find("--config s.json: output.trace_level | "),
            std::string::npos);
  EXPECT_NE(fieldOf([] { rt::runSpecFromJson(R"({"output": 3})", "s.json"); }).find("--config s.json: output"),
            std::string::npos);
  EXPECT_NE(fieldOf([] { rt::runSpecFromJson(R"({"quiet": "yes"})", "s.json"); }).find("has the wrong type"),
            std::string::npos);
}

TEST(ConfigFields, ALoneConfigFlagReadsTheFileStraight) {
  const std::string path = tempPath("lone-spec.json");
  rt::RunSpec s;
  s.config.steps = 2;
  s.output.out = "/tmp/lone.db";
  s.quiet = true;
  std::ofstream(path) << rt::toJson(s);
  const auto read = apps::configOnly({"trainscope-train", "run", "--config", path});
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->config.steps, 2);
  EXPECT_EQ(read->output.out, "/tmp/lone.db");
  EXPECT_TRUE(read->quiet);
  EXPECT_TRUE(apps::configOnly({"trainscope-train", "run", "--config=" + path}).has_value());
  EXPECT_FALSE(apps::configOnly({"trainscope-train", "run", "--config", path, "--steps", "4"}).has_value());
  EXPECT_FALSE(apps::configOnly({"trainscope-train", "run", "--steps", "4"}).has_value());
  EXPECT_NE(fieldOf([] { apps::configOnly({"trainscope-train", "run", "--config", "/no/such.json"}); })
                .find("--config | "),
            std::string::npos);
  // With other flags, the file's spec is expanded into flags that the others override.
  const auto argv = apps::expandConfigFlag({"trainscope-train", "run", "--config", path, "--steps", "4"});
  const apps::RunFlags f = parseRun(std::vector<std::string>(argv.begin() + 2, argv.end()));
  EXPECT_EQ(f.cfg.steps, 4);
  EXPECT_EQ(f.out.out, "/tmp/lone.db");
  EXPECT_TRUE(f.quiet);
}

TEST(ConfigFields, ZeroStagesAreNumbersZeroToThreeAndResolveRunsZeroAndOne) {
  EXPECT_EQ(rt::fromJson(R"({"zero": 1})", "t").zero, rt::ZeroStage::OptimizerStates);
  EXPECT_NE(fieldOf([] { rt::fromJson(R"({"zero": 4})", "t"); }).find("--config t: zero | "), std::string::npos);
  EXPECT_NE(fieldOf([] { rt::fromJson(R"({"zero": "1"})", "t"); }).find("has the wrong type"), std::string::npos);
  EXPECT_EQ(parseRun({"--zero", "1"}).cfg.zero, rt::ZeroStage::OptimizerStates);
  EXPECT_NE(fieldOf([] { parseRun({"--zero", "-1"}); }).find("--zero | "), std::string::npos);
  EXPECT_TRUE(rt::shardsOptimizer(rt::ZeroStage::OptimizerStates));
  EXPECT_FALSE(rt::shardsOptimizer(rt::ZeroStage::None));
  {  // ZeRO-3 runs (runtime/src/parallel/zero3.h), with hybrid sharding; what it does not run is refused.
    rt::TrainConfig c;
    c.nproc = 4;
    c.zero = rt::ZeroStage::Parameters;
    c.zero_shard_size = 2;
    rt::resolve(c);
    EXPECT_EQ(c.dp, 4);
    c.zero_shard_size = 3;
    EXPECT_EQ(fieldOf([&] { rt::resolve(c); }).rfind("--zero-shard-size | ", 0), 0u);
    c.zero_shard_size = 0;
    c.pp = 2;
    EXPECT_EQ(fieldOf([&] { rt::resolve(c); }).rfind("--zero | ", 0), 0u);
    c.pp = 1;
    c.zero = rt::ZeroStage::OptimizerStates;
    c.zero_shard_size = 2;
    EXPECT_EQ(fieldOf([&] { rt::resolve(c); }).rfind("--zero-shard-size | ", 0), 0u);
  }
  // ZeRO-2 runs, except with Adafactor over several DP ranks (its factored moments need whole
  // matrices; a ZeRO-2 shard is a slice) and with local SGD.
  rt::TrainConfig c2;
  c2.nproc = 2;
  c2.zero = rt::ZeroStage::Gradients;
  rt::resolve(c2);
  EXPECT_EQ(c2.dp, 2);
  c2.optimizer = rt::OptimizerKind::Adafactor;
  std::string e = fieldOf([&] { rt::resolve(c2); });
  EXPECT_EQ(e.rfind("--zero | ", 0), 0u) << e;
  EXPECT_NE(e.find("Adafactor"), std::string::npos) << e;
  c2.optimizer = rt::OptimizerKind::AdamW;
  c2.local_sgd = 2;
  e = fieldOf([&] { rt::resolve(c2); });
  EXPECT_EQ(e.rfind("--local-sgd | ", 0), 0u) << e;
}

TEST(ConfigFields, EnumsKeepTheirTextForms) {
  for (const char* s : {"steps", "ranges", "ops", "all"}) EXPECT_STREQ(rt::toString(rt::parseTraceLevel(s)), s);
  EXPECT_NE(fieldOf([] { rt::parseTraceLevel("loud"); }).find("use one of steps|ranges|ops|all"), std::string::npos);
  EXPECT_NE(fieldOf([] { parseRun({"--trace-level", "loud"}); }).find("--trace-level | "), std::string::npos);
  namespace md = trainscope::models;
  for (const char* s : {"gpu", "cpu"}) EXPECT_STREQ(md::toString(md::parseClusterKind(s, "kind")), s);
  EXPECT_EQ(fieldOf([] { md::parseClusterKind("tpu", "cluster.kind"); }).rfind("cluster.kind | ", 0), 0u);
  EXPECT_EQ(parseRun({"--launcher", "slurm"}).cfg.launcher, rt::Launcher::Slurm);
}

TEST(ConfigFields, EveryIntegerFlagRefusesAValueOutsideItsTypeNamingTheFlag) {
  // CLI11's conversion saturated (--steps 9223372036854775808 ran as 2^63 - 1) and nlohmann's cast
  // wraps (3000000000 into an int): every integer field of the list, through both text forms.
  int integers = 0;
  rt::visitFields([&](const rt::Field& f, auto m) {
    using T = std::decay_t<decltype(rt::TrainConfig{}.*m)>;
    constexpr bool optional_int = std::is_same_v<T, std::optional<int64_t>>;
    if constexpr (std::is_integral_v<T> || optional_int || std::is_same_v<T, rt::ZeroStage>) {
      if constexpr (std::is_same_v<T, bool>) return;
      ++integers;
      std::vector<std::string> bad = {"9223372036854775808", "-9223372036854775809", "99999999999999999999999", "2.5",
                                      "12abc", " 3", ""};
      if constexpr (std::is_same_v<T, int>) bad.insert(bad.end(), {"2147483648", "-2147483649"});
      if constexpr (std::is_same_v<T, uint64_t>) bad = {"18446744073709551616", "-1", "2.5"};
      if (f.has(rt::Field::kBytes)) bad = {"9223372036854775808", "-1", "12abc"};  // "2.5K" is a byte count
      for (const std::string& v : bad) {
        if (v.empty()) continue;  // (an empty value is refused before parsing: expandConfigFlag)
        const std::string got = fieldOf([&] { parseRun({f.flag, v}); });
        EXPECT_EQ(got.rfind(std::string(f.flag) + " | ", 0), 0u) << f.flag << " " << v << " → " << got;
      }
      // The JSON form: a number past the member's range, or not whole.
      for (const std::string& v : {std::string("1e30"), std::string("2.5"),
                                   std::string(std::is_same_v<T, int> ? "3000000000" : "18446744073709551616")}) {
        const std::string got = fieldOf([&] { rt::fromJson("{\"" + std::string(f.key) + "\": " + v + "}", "cfg.json"); });
        EXPECT_EQ(got.rfind("--config cfg.json: " + std::string(f.key) + " | ", 0), 0u) << f.key << " " << v << " → " << got;
      }
    }
  });
  EXPECT_EQ(integers, 21);
  // In range, the extremes read back exactly.
  EXPECT_EQ(parseRun({"--steps", "9223372036854775807"}).cfg.steps, INT64_MAX);
  EXPECT_EQ(parseRun({"--nproc", "2147483647"}).cfg.nproc, INT32_MAX);
  EXPECT_EQ(*parseRun({"--gbs", "-9223372036854775808"}).cfg.gbs, INT64_MIN);  // resolve() then says "> 0"
}

// Interleaving has one name: `run --pp-schedule interleaved` is 1f1b with 2 chunks per pipeline rank,
// or --virtual-stages' count wherever it stands on the line; the older `--pp-schedule 1f1b
// --virtual-stages V` is the same config; JSON takes the name too; scheduleName says it back.
TEST(ConfigFields, RunTakesInterleavingByItsOneName) {
  const rt::TrainConfig plain = parseRun({"--pp", "2", "--pp-schedule", "interleaved"}).cfg;
  EXPECT_EQ(plain.pp_schedule, rt::PipelineSchedule::OneFOneB);
  EXPECT_EQ(plain.virtual_stages, 2);
  EXPECT_STREQ(rt::scheduleName(plain), "interleaved");
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--pp", "2", "--pp-schedule", "interleaved", "--virtual-stages", "4"},
           {"--pp", "2", "--virtual-stages", "4", "--pp-schedule", "interleaved"},
           {"--pp", "2", "--pp-schedule", "1f1b", "--virtual-stages", "4"}}) {
    const rt::TrainConfig c = parseRun(args).cfg;
    EXPECT_EQ(c.virtual_stages, 4) << joined(args);
    EXPECT_EQ(rt::toJson(c), rt::toJson(parseRun({"--pp", "2", "--virtual-stages", "4"}).cfg)) << joined(args);
  }
  EXPECT_EQ(rt::fromJson(R"({"pp": 2, "pp_schedule": "interleaved"})", "cfg.json").virtual_stages, 2);
  EXPECT_EQ(rt::fromJson(R"({"pp": 2, "pp_schedule": "interleaved", "virtual_stages": 3})", "cfg.json").virtual_stages, 3);
  // Named together with 1 virtual stage, "interleaved" is refused (it once ran v2 silently), in
  // either order and in a config file.
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--pp", "2", "--pp-schedule", "interleaved", "--virtual-stages", "1"},
           {"--pp", "2", "--virtual-stages", "1", "--pp-schedule", "interleaved"}})
    EXPECT_NE(fieldOf([&] { parseRun(args); }).find("--pp-schedule | --pp-schedule: \"interleaved\" runs 2 or more"), std::string::npos)
        << joined(args);
  EXPECT_NE(fieldOf([] { rt::fromJson(R"({"pp": 2, "pp_schedule": "interleaved", "virtual_stages": 1})", "cfg.json"); })
                .find("given as 1"),
            std::string::npos);
  EXPECT_NE(fieldOf([] { parseRun({"--pp-schedule", "zigzag"}); }).find("--pp-schedule | "), std::string::npos);
  EXPECT_NE(fieldOf([] { parseRun({"--pp-schedule", "zigzag"}); }).find("gpipe|1f1b|interleaved"), std::string::npos);
  EXPECT_STREQ(rt::scheduleName(parseRun({"--pp-schedule", "gpipe"}).cfg), "gpipe");
  EXPECT_STREQ(rt::scheduleName(rt::TrainConfig{}), "1f1b");
  // Resolved on a 4-layer model over 2 stages, as `run` trains it.
  rt::TrainConfig c = parseRun({"--workload", "small-cpu", "--nproc", "2", "--pp", "2", "--pp-schedule", "interleaved",
                                "--gbs", "8", "--mbs", "1"}).cfg;
  rt::resolve(c);
  EXPECT_EQ(c.virtual_stages, 2);
  EXPECT_EQ(c.dp, 1);
}

// The layout is one struct: TrainConfig and the models' Plan hold the same Parallelism, and the
// degrees are bounded before their product is formed (int64 now, as the Plan's).
TEST(ConfigFields, TheLayoutIsOneStructWithBoundedDegrees) {
  rt::TrainConfig c = parseRun({"--workload", "tiny", "--tp", "2", "--ep", "1", "--zero", "1", "--nproc", "4"}).cfg;
  rt::resolve(c);
  const rt::Parallelism& layout = c;
  EXPECT_EQ(layout.tp, 2);
  EXPECT_EQ(layout.dp, 2);
  EXPECT_EQ(layout.zero, rt::ZeroStage::OptimizerStates);
  for (const char* flag : {"--tp", "--pp", "--cp", "--ep", "--virtual-stages", "--zero-shard-size"}) {
    rt::TrainConfig big = parseRun({"--workload", "tiny", flag, "2097152"}).cfg;
    const std::string got = fieldOf([&] { rt::resolve(big); });
    EXPECT_EQ(got.rfind(std::string(flag) + " | ", 0), 0u) << got;
    EXPECT_NE(got.find("must be at most 2^20 (1048576), not 2097152"), std::string::npos) << got;
  }
}

// A misspelt key ("stpes") in a --config file is refused naming the key it resembles, with the config
// part and the output part alike: ignored, it left the setting at its default without a word (a run
// of 10 steps, not 2). Keys far from every known one (a later version's) and the derived ones are
// ignored as before; so are the other keys of a whole `run --json` line.
TEST(ConfigFields, AMisspeltConfigKeyIsRefusedNamingTheKeyItResembles) {
  const std::string steps = fieldOf([] { rt::fromJson(R"({"stpes": 2, "workload": "tiny"})", "c.json"); });
  EXPECT_EQ(steps.rfind("--config c.json: stpes | ", 0), 0u) << steps;
  EXPECT_NE(steps.find("unknown key; did you mean \"steps\"?"), std::string::npos) << steps;
  const std::string set = fieldOf([] { rt::fromJson(R"({"steps": 2, "seqq": 64})", "c.json"); });
  EXPECT_NE(set.find("did you mean \"seq\"?"), std::string::npos) << set;
  const std::string twice = fieldOf([] { rt::fromJson(R"({"steps": 2, "step": 4})", "c.json"); });
  EXPECT_NE(twice.find("did you mean \"steps\"? (that key is set as well)"), std::string::npos) << twice;
  const std::string out = fieldOf([] { rt::runSpecFromJson(R"({"output": {"ovewrite": true}})", "s.json"); });
  EXPECT_EQ(out.rfind("--config s.json: output.ovewrite | ", 0), 0u) << out;
  EXPECT_NE(out.find("unknown key; did you mean \"overwrite\"?"), std::string::npos) << out;
  const std::string quiet = fieldOf([] { rt::runSpecFromJson(R"({"quite": true})", "s.json"); });
  EXPECT_NE(quiet.find("did you mean \"quiet\"?"), std::string::npos) << quiet;
  // Not refused: a later version's key, short keys two letters apart from ours ("xp" is not "ep"),
  // the derived keys, and a whole --json line's other members.
  EXPECT_EQ(rt::fromJson(R"({"steps": 3, "xp": 2, "future_knob_of_v9": 1, "dp": 2, "world": 2, "n_layer": 4})", "c.json")
                .steps,
            3);
  EXPECT_EQ(rt::fromJson(R"({"summary": {"stpes": 1}, "config": {"steps": 5}})", "line.json").steps, 5);
  // Everything toJson writes reads back.
  rt::RunSpec s;
  s.output.trace = "/tmp/x.db";
  s.output.save = "/tmp/ck";
  s.output.save_every = 2;
  s.output.resume = "/tmp/ck";
  EXPECT_EQ(rt::toJson(rt::runSpecFromJson(rt::toJson(s), "spec.json")), rt::toJson(s));
}
