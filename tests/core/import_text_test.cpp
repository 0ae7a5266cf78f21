// import_text_test.cpp — Kineto files as torch 2.11's profiler really writes them, found by an audit
// with real traces (2026-12-07): a record_function name holding a quote is written unescaped (not
// JSON), and the import reads it as part of the name instead of refusing the whole trace; the step
// the profiler's stop cut as it began is not a step; an empty file and a metadata-only trace are
// refused naming the file.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kineto_events.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/import.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/report.h"

namespace tr = trainscope::rundb;
using nlohmann::json;
using trainscope::testing::tempPath;
using namespace trainscope::testing::kineto_events;

namespace {

std::string writeText(const std::string& name, const std::string& text) {
  const std::string in = tempPath(name);
  std::ofstream(in, std::ios::binary) << text;
  return in;
}

// An annotation as Kineto's writer prints it: the name between quotes as is (torch 2.11 escapes
// nothing: record_function('say "hi"') gives "name": "say "hi"").
std::string rawAnnotation(const std::string& raw_name, int ts, int dur) {
  return "{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"" + raw_name +
         "\", \"pid\": 1, \"tid\": 1,\n  \"ts\": " + std::to_string(ts) + ", \"dur\": " + std::to_string(dur) + "}";
}
std::string rawFile(const std::vector<std::string>& events, const std::string& head = "") {
  std::string s = "{\"baseTimeNanoseconds\": " + std::to_string(kEventsBase) + ", " + head + "\"traceEvents\": [\n";
  for (size_t i = 0; i < events.size(); ++i) s += (i ? ",\n" : "") + events[i];
  return s + "\n]}\n";
}

std::vector<std::string> rangeNames(const std::string& db) {
  tr::RunReader rd(db);
  std::vector<std::string> names;
  for (const auto& r : rd.events<tr::Range>(0)) names.push_back(rd.string(r.name));
  return names;
}

}  // namespace

// Before: `import: P is not valid JSON (at byte 93: … last read: '"say "hi'; expected '}')`, and the
// whole trace was refused. Now each quote that cannot end the string (what follows it is not , : } ]
// after blanks) is part of the name, counted per file; a valid file reads as before.
TEST(ImportText, AQuoteTheProfilerWroteUnescapedIsPartOfTheName) {
  const std::string in = writeText("quotes.json", rawFile({rawAnnotation("ProfilerStep#0", 10, 100),
                                                          rawAnnotation("say \"hi\"", 20, 5),
                                                          rawAnnotation("\"lead and trail\"", 30, 5),
                                                          rawAnnotation("a \" b", 40, 5),
                                                          rawAnnotation("plain", 50, 5)}));
  const std::string db = tempPath("quotes.db");
  const tr::ImportStats st = tr::importTraces({in}, db, true);
  EXPECT_EQ(rangeNames(db), (std::vector<std::string>{"ProfilerStep#0", "say \"hi\"", "\"lead and trail\"", "a \" b", "plain"}));
  ASSERT_EQ(st.repaired_quotes.size(), 1u);
  EXPECT_EQ(st.repaired_quotes.at(in), 5);
  EXPECT_NE(tr::describeRefusals(st).find("5 quote(s) inside a string, written unescaped"), std::string::npos);
  tr::RunReader rd(db);
  EXPECT_EQ(json::parse(rd.meta().at("import_repaired_quotes")), (json{{in, 5}}));
}

// The quote held across the reader's 64 KiB pieces, and a string's end followed by more blanks than
// the reader holds: both read as JSON says. A valid file counts no repair.
TEST(ImportText, AHeldQuoteCrossesPiecesAndLongBlanksStillCloseTheString) {
  const std::string head = rawFile({}).substr(0, rawFile({}).find("[\n") + 2);
  std::string text = head + rawAnnotation("ProfilerStep#0", 10, 100) + ",\n";
  const std::string prefix = "{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"";
  const size_t fill = 65535 - text.size() - prefix.size();  // the quote is the piece's last byte
  const std::string long_name = std::string(fill, 'x') + "\"q";
  text += rawAnnotation(long_name, 20, 5) + ",\n" + prefix + "spaced\"" + std::string(40, ' ') +
          ", \"pid\": 1, \"tid\": 1, \"ts\": 30, \"dur\": 5}\n]}";
  ASSERT_EQ(text[65535], '"');
  const std::string db = tempPath("pieces.db");
  const tr::ImportStats st = tr::importTraces({writeText("pieces.json", text)}, db, true);
  const auto names = rangeNames(db);
  ASSERT_EQ(names.size(), 3u);
  EXPECT_EQ(names[1], long_name);
  EXPECT_EQ(names[2], "spaced");
  EXPECT_EQ(st.repaired_quotes.begin()->second, 1);

  const tr::ImportStats valid = tr::importTraces({writeText("valid.json", rawFile({rawAnnotation("ProfilerStep#0", 10, 100),
                                                                                   rawAnnotation("say \\\"hi\\\"", 20, 5)}))},
                                                 tempPath("valid.db"), true);
  EXPECT_TRUE(valid.repaired_quotes.empty());
  EXPECT_EQ(rangeNames(tempPath("valid.db"))[1], "say \"hi\"");
}

// A name holding `", "`: torch 2.11 writes record_function('my", "op') as `"name": "my", "op", "pid": …`,
// where the quote after `my` can end a string (a comma follows), so the quote rule above cannot see it
// and the import failed (`expected ':'`). The lines of an event's header are repaired whole before the
// text is folded (kineto_names.h): the name runs to the line's last `", "pid": `, and a metadata
// event's `"name": "…"` line to its last quote. As torch writes the file: `{` on its own line.
TEST(ImportText, ANameHoldingQuoteCommaQuoteIsPartOfTheName) {
  auto header = [](const std::string& raw, int ts, int dur) {
    return "  {\n    \"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"" + raw +
           "\", \"pid\": 1, \"tid\": 1,\n    \"ts\": " + std::to_string(ts) + ", \"dur\": " + std::to_string(dur) +
           ",\n    \"args\": {\n      \"External id\": 1\n    }\n  }";
  };
  const std::string thread = "  {\n    \"name\": \"thread_name\", \"ph\": \"M\", \"ts\": 1, \"pid\": 1, \"tid\": 1,\n"
                             "    \"args\": {\n      \"name\": \"main\", \"loop\"\n    }\n  }";
  const std::string in = writeText("quote_comma.json", rawFile({thread, header("ProfilerStep#0", 10, 100),
                                                                header("my\", \"op", 20, 5), rawAnnotation("a\", \"b", 30, 5),
                                                                header("x\", \"pid\": 2, \"y", 40, 5)}));
  const std::string db = tempPath("quote_comma.db");
  const tr::ImportStats st = tr::importTraces({in}, db, true);
  EXPECT_EQ(rangeNames(db), (std::vector<std::string>{"ProfilerStep#0", "my\", \"op", "a\", \"b", "x\", \"pid\": 2, \"y"}));
  EXPECT_EQ(st.repaired_quotes.at(in), 2 + 2 + 2 + 4);  // the thread's name, then the three ranges'
  tr::RunReader rd(db);
  bool named = false;
  for (const auto& t : rd.threads()) named = named || rd.string(t.name) == "main\", \"loop";
  EXPECT_TRUE(named);
  // Written escaped (valid JSON), the same names read as they are, and nothing is counted as repaired.
  const std::string valid = writeText("quote_comma_valid.json", rawFile({header("ProfilerStep#0", 10, 100),
                                                                         header("my\\\", \\\"op", 20, 5)}));
  const tr::ImportStats ok = tr::importTraces({valid}, tempPath("quote_comma_valid.db"), true);
  EXPECT_TRUE(ok.repaired_quotes.empty());
  EXPECT_EQ(rangeNames(tempPath("quote_comma_valid.db"))[1], "my\", \"op");
}

// schedule(wait=0, warmup=1, active=3) over 5 iterations that end with p.step(): the trace ends with
// ProfilerStep#5 begun by the last p.step() and closed 19 µs later by the profile's exit, nothing in
// it — and tensorboard_trace_handler writes the cut cycle as a file holding only that step. Before,
// it was a step of 19 µs (the 4-step mean 49 ms where the steps took 65 ms), and the cut cycle's file
// alone became a step 0. Now it is a range, not a step, said per file; a user range around the
// whole loop is not work in it, and an empty step that is not the last is still a step.
TEST(ImportText, TheStepTheProfilersStopCutAsItBeganIsNotAStep) {
  json loop = annotation("my_loop", 0, 4000);
  const json cycle = json::array({loop, step(1, 10, 1000), op("aten::mm", 20, 900), step(2, 1010, 1),
                                  step(3, 1011, 1000), op("aten::mm", 1020, 900), step(4, 2011, 19)});
  const std::string a = tempPath("cycle.json"), b = tempPath("cut_cycle.json");
  std::ofstream(a) << json{{"baseTimeNanoseconds", kEventsBase}, {"traceEvents", cycle}}.dump();
  std::ofstream(b) << json{{"baseTimeNanoseconds", kEventsBase}, {"traceEvents", json::array({step(6, 5000, 19)})}}.dump();
  const std::string db = tempPath("cut.db");
  const tr::ImportStats st = tr::importTraces({a, b}, db, true);
  tr::RunReader rd(db);
  std::vector<int64_t> steps;
  for (const auto& s : rd.steps(0)) steps.push_back(s.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3}));  // step 2, empty but not the last, stays
  EXPECT_EQ(st.stop_stubs, (std::map<std::string, int64_t>{{a, 4}, {b, 6}}));
  EXPECT_NE(tr::describeRefusals(st).find("ProfilerStep#4, its last, holds no host event"), std::string::npos);
  EXPECT_EQ(rangeNames(db).size(), 6u);  // the loop and every ProfilerStep, the cut ones included
}

// A 0-byte file (a profiler killed before it wrote) and a trace of metadata only: each refused
// naming the file. They read "not valid JSON (at byte 1: … unexpected end of input)" and "nothing
// was recognised in 1 file(s)", which named no file.
TEST(ImportText, AnEmptyFileAndAMetadataOnlyTraceAreRefusedNamingTheFile) {
  auto refusal = [](const std::string& in) {
    try {
      tr::importTraces({in}, tempPath("refused.db"), true);
    } catch (const trainscope::UserError& e) {
      return std::string(e.what());
    }
    return std::string("(imported)");
  };
  const std::string empty = writeText("empty.json", "");
  EXPECT_NE(refusal(empty).find(empty + " is empty (0 bytes)"), std::string::npos) << refusal(empty);
  const std::string meta = writeText("meta.json", "{\"traceEvents\": [{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, "
                                                  "\"tid\": 0, \"args\": {\"name\": \"python\"}}]}");
  EXPECT_NE(refusal(meta).find("nothing was recognised in " + meta + ": "), std::string::npos) << refusal(meta);
}
