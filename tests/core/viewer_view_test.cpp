// viewer_view_test.cpp — the viewer's time view without a window: zoom, pan and fit at epoch scale,
// the ruler's exact labels at every zoom, demangled and shortened kernel names, scripts, PNG.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>

#include "../common/cli.h"
#include "../common/ruler_label.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/store.h"
#include "trainscope/viewer/details.h"
#include "trainscope/viewer/image.h"
#include "trainscope/viewer/lod.h"
#include "trainscope/viewer/model.h"
#include "trainscope/viewer/names.h"
#include "trainscope/viewer/query.h"
#include "trainscope/viewer/ruler.h"
#include "trainscope/viewer/view_state.h"

namespace v = trainscope::viewer;
namespace db = trainscope::rundb;
using trainscope::testing::tempPath;

TEST(ViewerView, ZoomPanFitAndRulerAtEpochScale) {
  v::TimeView view;
  view.origin = 1'700'000'000'000'000'000;
  view.x0 = 100;
  view.width = 1000;
  view.fit(view.origin + 1'000, view.origin + 2'000, 0);
  EXPECT_DOUBLE_EQ(view.t0, 1000);
  EXPECT_DOUBLE_EQ(view.t1, 2000);
  EXPECT_FLOAT_EQ(view.x(view.origin + 1'500), 600);  // one ns is half a pixel, exactly
  EXPECT_EQ(view.timeAt(600), view.origin + 1'500);
  view.zoom(2, 600);  // around the cursor: 1500 stays under it
  EXPECT_EQ(view.timeAt(600), view.origin + 1'500);
  EXPECT_DOUBLE_EQ(view.t1 - view.t0, 500);
  view.pan(100);  // content moves right: earlier times come in
  EXPECT_DOUBLE_EQ(view.t0, 1250 - 50);
  // Ruler: 1/2/5 steps, labels relative to the origin with units.
  view.t0 = 0;
  view.t1 = 10e6;  // 10 ms over 1000 px
  const auto ticks = v::makeRuler(view, 80).ticks;
  std::vector<std::string> majors;
  for (const auto& tk : ticks)
    if (tk.major) majors.push_back(tk.label);
  ASSERT_GE(majors.size(), 5u);
  EXPECT_EQ(majors[0], "0 ms");
  EXPECT_EQ(majors[1], "1 ms");
  EXPECT_EQ(v::formatDuration(1500), "1.5 us");
  EXPECT_EQ(v::formatBytes(3 << 29), "1.5 GiB");
  EXPECT_DOUBLE_EQ(v::parseTime("2.5ms", "--view"), 2.5e6);
  EXPECT_THROW(v::parseTime("2.5 parsecs", "--view"), trainscope::UserError);
}

namespace {
int64_t parseLabel(const std::string& s) { return trainscope::testing::parseRulerLabel(s); }

// Labels unique and each equal to its tick's time (absolute), or to base + offset (relative).
void expectExactRuler(const v::Ruler& r, const std::string& what) {
  std::set<std::string> seen;
  int majors = 0;
  for (const auto& tk : r.ticks) {
    if (!tk.major) {
      EXPECT_TRUE(tk.label.empty());
      continue;
    }
    ++majors;
    EXPECT_TRUE(seen.insert(tk.label).second) << what << ": label \"" << tk.label << "\" twice";
    EXPECT_LE(tk.label.size(), 12u) << what << ": " << tk.label;  // fits the 80 px between majors
    if (r.relative) {
      ASSERT_EQ(tk.label[0], '+') << what;
      EXPECT_EQ(parseLabel(r.base_label) + parseLabel(tk.label), tk.ns) << what << ": " << tk.label;
    } else {
      EXPECT_EQ(parseLabel(tk.label), tk.ns) << what << ": " << tk.label;
    }
  }
  EXPECT_GE(majors, 2) << what;
  if (r.relative) EXPECT_EQ(parseLabel(r.base_label), r.base) << what;
}
}  // namespace

TEST(ViewerView, RulerLabelsAreUniqueAndExactAtEveryZoom) {
  v::TimeView view;
  view.origin = 1'700'000'000'000'000'000;
  view.x0 = 190;
  view.width = 1210;
  auto at = [&](double t0, double span) {
    view.t0 = t0;
    view.t1 = t0 + span;
    return v::makeRuler(view);
  };
  // Windows of 1 ms, 100 us and 1 us placed past 100 s (at odd offsets): offsets from a base.
  for (double start : {100e9, 100.345'120'1e9, 123.456'789'012e9})
    for (double span : {1e6, 1e5, 1e3}) {
      const v::Ruler r = at(start, span);
      expectExactRuler(r, "window " + std::to_string(span) + " ns at " + std::to_string(start));
      EXPECT_TRUE(r.relative);
      EXPECT_GE(r.base, int64_t(start));
    }
  // The cases: 3.8 ms and 150 us windows past 345 ms read 345, 345, 346 ... and 348 ms x 4.
  for (auto [start, span] : {std::pair{345.2e6, 3.8e6}, std::pair{348.01e6, 150e3}, std::pair{0.0, 10e6}})
    expectExactRuler(at(start, span), "window " + std::to_string(span) + " at " + std::to_string(start));
  const v::Ruler near = at(345.2e6, 3.8e6);
  EXPECT_FALSE(near.relative);  // "345.5 ms": short enough to be absolute
  const auto first_major = std::find_if(near.ticks.begin(), near.ticks.end(), [](const v::Tick& t) { return t.major; });
  ASSERT_NE(first_major, near.ticks.end());
  EXPECT_EQ(first_major->label, "345.5 ms");
  const v::Ruler far = at(100.345'120'1e9, 1e3);
  EXPECT_EQ(far.base_label, "100.345 120 100 s");
  EXPECT_EQ(far.step, 100);
  // Random windows from 100 ns to 10 s anywhere in a day: always unique and exact.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> where(-1e9, 86'400e9), lg(2, 10);
  for (int i = 0; i < 2000; ++i) {
    const double start = std::floor(where(rng)), span = std::pow(10.0, lg(rng));
    expectExactRuler(at(start, span), "random window " + std::to_string(span) + " at " + std::to_string(start));
  }
  // Exact times for tooltips and Details.
  EXPECT_EQ(v::formatExact(0), "0 ns");
  EXPECT_EQ(v::formatExact(830), "830 ns");
  EXPECT_EQ(v::formatExact(1500), "1.5 us");
  EXPECT_EQ(v::formatExact(-2500), "-2.5 us");
  EXPECT_EQ(v::formatExact(1'254'321), "1.254 321 ms");
  EXPECT_EQ(v::formatExact(1'254'320), "1.254 320 ms");  // whole groups of three
  EXPECT_EQ(v::formatExact(100'345'000'000), "100.345 s");
  EXPECT_EQ(v::formatExact(100'345'120'123), "100.345 120 123 s");
  for (int64_t x : {int64_t(1), int64_t(999'999'999), int64_t(100'345'120'123), int64_t(86'399'999'999'999)})
    EXPECT_EQ(parseLabel(v::formatExact(x)), x);
}

namespace {
const char* kFillMangled =
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_";
const char* kAdamMangled =
    "_ZN2at6native12_GLOBAL__N_125multi_tensor_apply_kernelINS1_18TensorListMetadataILi4EEENS1_11AdamFunctorIfLi4EEEJfffffbfEEEvT_T0_DpT1_";
}  // namespace

TEST(ViewerNames, KernelNamesAreDemangledAndShortenedToFit) {
  // Demangled as c++filt does; anything else untouched.
  EXPECT_EQ(v::demangle(kFillMangled),
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> "
            ">(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)");
  EXPECT_EQ(v::demangle("_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LLP11ncclDevCommmP8ncclWork"),
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)");
  EXPECT_EQ(v::demangle("_Zgarbage"), "_Zgarbage");
  EXPECT_EQ(v::demangle("ampere_sgemm_128x64_nn"), "ampere_sgemm_128x64_nn");
  // Return type, then parameters, then namespaces, then nested template arguments, then all of them.
  EXPECT_EQ(v::nameForms(kFillMangled),
            (std::vector<std::string>{
                "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> "
                ">(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
                "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >",
                "vectorized_elementwise_kernel<4, FillFunctor<float>, Array<char*, 1> >",
                "vectorized_elementwise_kernel<4, FillFunctor<...>, Array<...> >", "vectorized_elementwise_kernel"}));
  EXPECT_EQ(v::shortName(kFillMangled, 1000), v::nameForms(kFillMangled)[0]);  // "void" never drawn
  // The same name as the PyTorch profiler writes it (already demangled) shortens the same way.
  EXPECT_EQ(v::nameForms(v::demangle(kFillMangled)), v::nameForms(kFillMangled));
  EXPECT_EQ(v::shortName(kFillMangled, 70), "vectorized_elementwise_kernel<4, FillFunctor<float>, Array<char*, 1> >");
  EXPECT_EQ(v::shortName(kFillMangled, 40), "vectorized_elementwise_kernel");
  EXPECT_EQ(v::shortName(kFillMangled, 20), "vectorized_elemen...");
  EXPECT_EQ(v::shortName(kFillMangled, 3), "");
  // Anonymous namespaces go with the others.
  const std::string adam = "multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float, 4>, float, float, float, "
                           "float, float, bool, float>";
  const std::string adam_nested = "multi_tensor_apply_kernel<TensorListMetadata<...>, AdamFunctor<...>, float, float, float, "
                                  "float, float, bool, float>";
  EXPECT_EQ(v::shortName(kAdamMangled, adam.size()), adam);
  EXPECT_EQ(v::shortName(kAdamMangled, adam.size() - 1), adam_nested);
  // NCCL: the parameters go first; a plain kernel name stays as it is until it is cut.
  const std::string nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)";
  EXPECT_EQ(v::shortName(nccl, 60), "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
  EXPECT_EQ(v::shortName(nccl, 200), nccl);
  EXPECT_EQ(v::nameForms("ampere_sgemm_128x64_nn"), std::vector<std::string>{"ampere_sgemm_128x64_nn"});
  EXPECT_EQ(v::shortName("ampere_sgemm_128x64_nn", 12), "ampere_sg...");
  // Lambdas in template arguments (at::native's elementwise kernels): the innermost name is kept.
  const std::string lambda =
      "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda("
      "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, "
      "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(float)#1} "
      "const&)::{lambda(int)#1}>(int, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(int)#1})";
  EXPECT_EQ(v::shortName(lambda, 50), "elementwise_kernel<128, 2, {lambda(int)#1}>");
  EXPECT_EQ(v::shortName(lambda, 30), "elementwise_kernel");
  // Operators are names, not brackets.
  EXPECT_EQ(v::nameForms("bool std::operator< <int>(A const&, B const&)")[1], "std::operator< <int>");
  EXPECT_EQ(v::nameForms("at::Foo::operator()(int) const").back(), "operator()");
  // Not C++ signatures: only namespaces go; nothing is taken for a return type or parameters.
  EXPECT_EQ(v::nameForms("all_reduce (dp)"), std::vector<std::string>{"all_reduce (dp)"});
  EXPECT_EQ(v::nameForms("memcpy HtoD"), std::vector<std::string>{"memcpy HtoD"});
  EXPECT_EQ(v::nameForms("aten::mm"), (std::vector<std::string>{"aten::mm", "mm"}));
  // Every fit is within its width, and whole forms are never cut.
  for (const std::string& n : {std::string(kFillMangled), std::string(kAdamMangled), nccl, lambda})
    for (size_t w = 0; w < 300; ++w) {
      const std::string f = v::shortName(n, w);
      EXPECT_LE(f.size(), w);
      EXPECT_NE(f.rfind("void", 0), 0u) << f;
      EXPECT_NE(f.rfind("_Z", 0), 0u) << f;
    }
}

// Wrapper templates name their argument, and no two distinct names of one trace share a short name:
// two CUTLASS GEMMs were both "Kernel" on the timeline and as two rows of Statistics.
TEST(ViewerNames, WrapperTemplatesNameTheirArgumentAndNoTwoNamesReadAlike) {
  const std::string gemm_a = "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>(Params)";
  const std::string gemm_b = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(Params)";
  const std::string dev = "void at::native::device_kernel<at::native::FlashFwd<float, 128> >(Params)";
  const std::string node = "torch::autograd::CppNode<trainscope::BlockCheckpoint>";
  EXPECT_EQ(v::nameForms(gemm_a).back(), "cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4");
  EXPECT_EQ(v::nameForms(gemm_b).back(), "cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4");
  EXPECT_EQ(v::nameForms(dev).back(), "FlashFwd");
  EXPECT_EQ(v::shortName(dev, 30), "FlashFwd<float, 128>");
  EXPECT_EQ(v::nameForms(node).back(), "BlockCheckpoint");
  EXPECT_EQ(v::nameForms("void Kernel<4>(int)").back(), "Kernel");  // a number names nothing: kept as it was
  for (const auto& f : v::nameForms(gemm_a)) EXPECT_NE(f, "Kernel2");
  // Two kernels both "gemm" (and "Kernel<gemm>"), another in two namespaces: every fit differs.
  const std::vector<std::string> names = {"void a::gemm<float>(int)", "void b::gemm<float>(int)", "cutlass::Kernel<x::gemm>",
                                          "aten::mm", gemm_a, "mm", kFillMangled, v::demangle(kFillMangled)};
  v::NameForms forms;
  for (size_t w : {4u, 8u, 12u, 16u, 30u, 200u}) {
    std::map<std::string, std::set<std::string>> full_of;  // a fit → the longest forms it stands for
    for (uint32_t id = 0; id < names.size(); ++id) {
      const std::string f = forms.fit(id, names, w);
      EXPECT_LE(f.size(), w) << f;
      if (!f.empty() && f.find("...") == std::string::npos) full_of[f].insert(v::nameForms(names[id]).front());
    }  // (a name cut to fit says so with "..."; its full name is on hover)
    for (const auto& [fit, fulls] : full_of) EXPECT_EQ(fulls.size(), 1u) << "width " << w << ": " << fit;
  }
  EXPECT_EQ(forms.fit(0, names, 8), "gemm #1");
  EXPECT_EQ(forms.fit(1, names, 8), "gemm #2");
  EXPECT_EQ(forms.fit(2, names, 8), "gemm #3");
  EXPECT_EQ(forms.fit(3, names, 200), "aten::mm");
  EXPECT_EQ(forms.fit(3, names, 5), "mm #1");
  EXPECT_EQ(forms.fit(5, names, 5), "mm #2");
  EXPECT_EQ(forms.fit(4, names, 30), "cutlass_80_tensorop_s1688ge...");  // no other reads alike: no suffix
  EXPECT_EQ(forms.fit(6, names, 40), "vectorized_elementwise_kernel");  // one name spelt twice is one name
  EXPECT_EQ(forms.fit(7, names, 40), "vectorized_elementwise_kernel");
  EXPECT_EQ(forms.full(0, names), names[0]);
}

TEST(ViewerNames, DetailsAndSearchUseTheDemangledName) {
  const std::string path = tempPath("v_mangled.db");
  {
    db::RunStore st(path, {true, "--out", true});
    st.setMeta("world_size", "1");
    st.begin();
    st.put(db::Kernel{1'000, 5'000, 0, 7, st.intern(kFillMangled), -1});
    st.commit();
    st.createIndexes();
    st.close();
  }
  const v::Trace t = v::loadTrace(path);
  const v::SearchResult s = v::search(t, "FillFunctor<float>");  // only in the demangled name
  ASSERT_EQ(s.matches.size(), 1u);
  db::RunReader r(path);
  std::map<std::string, std::string> f;
  for (const auto& [key, value] : v::eventDetails(r, t, s.matches[0])) f[key] = value;
  EXPECT_EQ(f["name"], v::demangle(kFillMangled));
  EXPECT_EQ(f["mangled"], kFillMangled);
  EXPECT_EQ(f["duration"], "4 us (4000 ns)");
}

TEST(ViewerView, ScriptsParseAndNameTheBadLine) {
  const auto cmds = v::parseScript("# comment\nview 0 2ms\nzoom 2 0.25\n\npan -0.5\nselect aten::mm 3\nsearch gemm\nnext\n", "s.txt");
  ASSERT_EQ(cmds.size(), 6u);
  EXPECT_EQ(cmds[1].op, "zoom");
  EXPECT_EQ(cmds[1].line, 3);
  try {
    v::parseScript("view 0 1ms\nwobble 3\n", "s.txt");
    FAIL();
  } catch (const trainscope::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("s.txt:2: unknown command \"wobble\""), std::string::npos) << e.what();
  }
  EXPECT_THROW(v::parseScript("zoom lots\n", "s.txt"), trainscope::UserError);
  EXPECT_THROW(v::parseScript("view 0\n", "s.txt"), trainscope::UserError);
  EXPECT_THROW(v::parseScript("view 0 1 parsec\n", "s.txt"), trainscope::UserError);
  EXPECT_EQ(v::parseScript("stats range\nstats ops\nstats all\n", "s.txt").size(), 3u);
  EXPECT_THROW(v::parseScript("stats wobble\n", "s.txt"), trainscope::UserError);
}

// A name with spaces (a collective: "all_reduce (dp)") is one argument when quoted.
TEST(ViewerView, ScriptSelectTakesAQuotedName) {
  const auto cmds = v::parseScript("select \"all_reduce (dp)\" 2\nselect aten::mm\n", "s.txt");
  ASSERT_EQ(cmds.size(), 2u);
  EXPECT_EQ(cmds[0].args, (std::vector<std::string>{"all_reduce (dp)", "2"}));
  EXPECT_EQ(cmds[1].args, (std::vector<std::string>{"aten::mm"}));
  EXPECT_THROW(v::parseScript("select all_reduce (dp) 2\n", "s.txt"), trainscope::UserError);  // 3 arguments
}

// The hint of an unknown command names every command a script may hold, those parsed outside
// parseScript (notes.cpp's bookmark, note, drop, overlay; the tables' csv, sql, diff) included.
TEST(ViewerView, AnUnknownScriptCommandsHintNamesEveryCommand) {
  std::string msg;
  try {
    v::parseScript("wobble\n", "s.txt");
  } catch (const trainscope::UserError& e) {
    msg = e.what();
  }
  const size_t at = msg.find("use view");
  ASSERT_NE(at, std::string::npos) << msg;
  std::set<std::string> named;
  std::string word;
  for (char ch : msg.substr(at + 4)) {  // "(fix: use view, zoom, …, [ or ])"
    if (ch == ',' || ch == ' ' || ch == '\n' || ch == ')') {
      if (!word.empty() && word != "or") named.insert(word);
      word.clear();
    } else {
      word += ch;
    }
  }
  if (!word.empty()) named.insert(word);
  for (const char* c : {"view", "zoom", "pan", "step", "select", "search", "next", "prev", "range", "tab", "stats",
                        "frames", "clear", "open", "bookmark", "note", "drop", "overlay", "csv", "sql", "diff",
                        "collapse", "expand", "hide", "show", "pin", "unpin", "move", "empty", "split", "[", "]"})
    EXPECT_TRUE(named.count(c)) << c << " missing from: " << msg;
}

TEST(ViewerView, PngRoundTrip) {
  v::Image img;
  img.width = 37;
  img.height = 11;
  for (int i = 0; i < img.width * img.height; ++i)
    for (int c = 0; c < 4; ++c) img.rgba.push_back(uint8_t(i * 7 + c * 50));
  const std::string p = tempPath("rt.png");
  v::writePng(p, img);
  const v::Image back = v::readPng(p);
  EXPECT_EQ(back.width, 37);
  EXPECT_EQ(back.height, 11);
  EXPECT_EQ(back.rgba, img.rgba);
  EXPECT_EQ(back.pixel(3, 2), img.pixel(3, 2));
  EXPECT_THROW(v::writePng("/no/such/folder/x.png", img), trainscope::UserError);
}
