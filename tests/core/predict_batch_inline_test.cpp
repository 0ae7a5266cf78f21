// predict_batch_inline_test.cpp — a `predict --batch` line's "workload" and "cluster" given as the
// JSON object itself (a workload file's object, a Hugging Face config.json's, a cluster file's), as a
// line generated from Python writes it: priced as the same file named by path, its errors naming the
// line and the field, nothing written beside the batch file.
#include <gtest/gtest.h>

#include <filesystem>
#include <iterator>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../common/cli.h"

using trainscope::testing::cli;
using trainscope::testing::tempPath;
namespace fs = std::filesystem;

namespace {

nlohmann::json readJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// `predict --batch` over `lines` (one folder of their own): each line's result, and the status.
std::pair<int, std::vector<nlohmann::json>> batch(const std::string& folder, const std::vector<nlohmann::json>& lines) {
  fs::create_directories(folder);
  const std::string in = folder + "/lines.jsonl";
  {
    std::ofstream f(in);
    for (const auto& l : lines) f << l.dump() << "\n";
  }
  const auto r = cli("predict --batch " + in);
  std::vector<nlohmann::json> out;
  std::istringstream text(r.output);
  for (std::string l; std::getline(text, l);)
    if (!l.empty() && l[0] == '{') out.push_back(nlohmann::json::parse(l));
  EXPECT_EQ(out.size(), lines.size()) << r.output;
  return {r.status, out};
}

const std::string kSource = TRAINSCOPE_SOURCE_DIR;

}  // namespace

// The object of a file prices as the file: trainscope's own workload (gpt2-355m), a Hugging Face
// config (llama3-8b's, GQA and SwiGLU), a cluster file's object at another node count.
TEST(PredictBatchInline, AnObjectPricesAsItsFile) {
  const std::string gpt2 = kSource + "/workloads/gpt2-355m.json", llama = kSource + "/workloads/llama3-8b.json",
                    h100 = kSource + "/models/clusters/h100-80gb-x8.json";
  const auto [status, out] = batch(tempPath("inline-same"),
                                   {{{"workload", gpt2}, {"tp", 2}, {"mbs", 4}},
                                    {{"workload", readJson(gpt2)}, {"tp", 2}, {"mbs", 4}},
                                    {{"workload", llama}, {"tp", 4}, {"seq", 4096}, {"zero", 1}},
                                    {{"workload", readJson(llama)}, {"tp", 4}, {"seq", 4096}, {"zero", 1}},
                                    {{"workload", gpt2}, {"cluster", h100}, {"nodes", 2}},
                                    {{"workload", gpt2}, {"cluster", readJson(h100)}, {"nodes", 2}}});
  ASSERT_EQ(status, 0);
  ASSERT_EQ(out.size(), 6u);
  for (size_t i = 0; i < out.size(); i += 2) {
    SCOPED_TRACE("lines " + std::to_string(i + 1) + " and " + std::to_string(i + 2));
    ASSERT_FALSE(out[i].contains("error")) << out[i].dump();
    ASSERT_FALSE(out[i + 1].contains("error")) << out[i + 1].dump();
    EXPECT_EQ(out[i]["time"], out[i + 1]["time"]);  // every term, step_s among them
    EXPECT_EQ(out[i]["peak_bytes"], out[i + 1]["peak_bytes"]);
    EXPECT_EQ(out[i]["parameters"], out[i + 1]["parameters"]);
    EXPECT_EQ(out[i]["plan"], out[i + 1]["plan"]);
    EXPECT_EQ(out[i]["workload"], out[i + 1]["workload"]);  // the object's "name"
  }
  EXPECT_EQ(out[5]["dp"], 16);  // 2 nodes of 8
  EXPECT_EQ(out[1]["parameters"], 354823168);  // GPT-2 medium's tied 355M
}

// An object whose name is a preset's is priced as the object, not the preset; one without a name is
// named "inline workload"; the runtime's checks read the object (a Hugging Face config has no file
// to load again).
TEST(PredictBatchInline, TheObjectIsWhatIsPriced) {
  const nlohmann::json small = {{"name", "gpt2-124m"}, {"n_layer", 2}, {"n_head", 2}, {"n_embd", 64},
                                {"n_positions", 128}, {"vocab_size", 100}};
  nlohmann::json nameless = readJson(kSource + "/workloads/llama3-8b.json");
  nameless.erase("name");
  const auto [status, out] = batch(tempPath("inline-own"), {{{"workload", small}}, {{"workload", nameless}, {"tp", 8}}});
  ASSERT_EQ(status, 0);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["workload"], "gpt2-124m");
  EXPECT_LT(out[0]["parameters"].get<int64_t>(), 1000000) << out[0].dump();  // not the 124M preset
  EXPECT_EQ(out[1]["workload"], "inline workload");
  EXPECT_EQ(out[1]["parameters"], 8030261248);  // Llama 3 8B
}

// Errors name the line, the key and the field; a good line beside them is priced; nothing is
// written next to the batch file.
TEST(PredictBatchInline, ErrorsNameTheLineAndTheField) {
  const std::string folder = tempPath("inline-errors");
  const auto [status, out] =
      batch(folder, {{{"workload", {{"n_layer", 2}}}},
                     {{"workload", 5}},
                     {{"workload", {{"model_type", "bert"}}}},
                     {{"cluster", {{"name", "x"}}}},
                     {{"cluster", nlohmann::json::array()}},
                     {{"workload", "gpt2-124m"}}});
  EXPECT_EQ(status, 2);
  ASSERT_EQ(out.size(), 6u);
  const std::vector<std::string> expected = {
      "--batch line 1: workload.n_head: missing in the workload object (fix: add \"n_head\": <integer>)",
      "--batch line 2: workload: must be a name, a JSON path or a JSON object, not 5",
      "--batch line 3: workload.model_type: \"bert\" in the workload object is not supported",
      "--batch line 4: cluster.devices_per_node: is missing",
      "--batch line 5: cluster: must be a name, a JSON path or a JSON object, not []"};
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(out[i].value("error", "").rfind(expected[i], 0), 0u) << out[i].dump();
  EXPECT_FALSE(out[5].contains("error")) << out[5].dump();
  EXPECT_EQ(std::distance(fs::directory_iterator(folder), fs::directory_iterator()), 1);  // the batch file only
}
