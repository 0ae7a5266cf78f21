// trainscope/viewer/names.h — event names as a reader wants them: Itanium C++ names demangled, and
// shortened Tracy-style to fit a box (`void at::native::vectorized_elementwise_kernel<4, …>(int, …)`
// becomes `vectorized_elementwise_kernel<4, FillFunctor<float>, Array<char*, 1> >`, then
// `vectorized_elementwise_kernel<…>`, then `vectorized_elementwise_kernel`, then `vectorized_el...`).
// The full name stays on hover. Plain strings in, plain strings out; no drawing here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainscope::viewer {

// An Itanium C++ mangled name ("_Z…", as CUPTI and Nsight report kernels) demangled through
// abi::__cxa_demangle; any other name, or one that does not demangle, comes back unchanged.
std::string demangle(const std::string& name);

// Ever shorter forms of a name to draw (demangled first), longest first, without repeats:
//   without the return type (always: every kernel returns void); without the parameter list;
//   without namespaces (also inside template arguments); with nested template arguments as <...>;
//   without template arguments. The full name, return type and all, is demangle()'s, for hover.
// A name that is not a C++ signature ("aten::mm", "memcpy HtoD", "all_reduce (dp)") loses only its
// namespaces: nothing is taken for a return type or a parameter list unless it is one.
// A wrapper template (Kernel, Kernel2, device_kernel, CppNode: `cutlass::Kernel2<cutlass_80_…_nn>(Params)`)
// names nothing by itself: its shorter forms are those of its first template argument
// (`cutlass_80_…_nn`), never `Kernel`.
std::vector<std::string> nameForms(const std::string& name);

// The longest form that fits in `max_chars` characters; else the shortest form cut, ending in "..."
// and then `suffix` (a name's " #2", kept when it is cut); empty when not even four characters fit.
std::string fitName(const std::vector<std::string>& forms, size_t max_chars, const std::string& suffix = {});
inline std::string shortName(const std::string& name, size_t max_chars) { return fitName(nameForms(name), max_chars); }

// The forms of many distinct names made distinct: where two names' forms read alike (two CUTLASS
// kernels both `Kernel`, `a::mm` and `b::mm` both `mm`), each such form gets " #k", k numbering the
// names that meet in their shortest form in the order of their longest. Returns each name's suffix
// ("" for a name no other meets).
std::vector<std::string> distinguish(std::vector<std::vector<std::string>>& forms);

// The forms of a trace's names, computed for all its names when first asked for and made distinct
// across them (distinguish): no two names of one trace share a short name, on the timeline or in
// any table (the UI thread's cache).
class NameForms {
 public:
  const std::vector<std::string>& of(uint32_t id, const std::vector<std::string>& names);
  const std::string& full(uint32_t id, const std::vector<std::string>& names) { return entry(id, names).full; }
  std::string fit(uint32_t id, const std::vector<std::string>& names, size_t max_chars);
  void clear() {
    cache_.clear();
    built_for_ = 0;
  }

 private:
  struct Entry {
    std::string full;                // demangled
    std::vector<std::string> forms;  // nameForms, distinguished
    std::string suffix;              // " #k" where another name reads alike
  };
  const Entry& entry(uint32_t id, const std::vector<std::string>& names);
  std::vector<Entry> cache_;
  size_t built_for_ = 0;
};

}  // namespace trainscope::viewer
