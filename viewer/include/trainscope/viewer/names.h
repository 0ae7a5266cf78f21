// trainscope/viewer/names.h — event names as a reader wants them: Itanium C++ names demangled, and
// shortened Tracy-style to fit a box (`void at::native::vectorized_elementwise_kernel<4, …>(int, …)`
// becomes `vectorized_elementwise_kernel<4, FillFunctor<float>, Array<char*, 1> >`, then
// `vectorized_elementwise_kernel<…>`, then `vectorized_elementwise_kernel`, then `vectorized_el...`).
// The full name stays on hover. Plain strings in, plain strings out; no drawing here.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
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
std::vector<std::string> nameForms(const std::string& name);

// The longest form that fits in `max_chars` characters; else the shortest form cut, ending in "...";
// empty when not even four characters fit.
std::string fitName(const std::vector<std::string>& forms, size_t max_chars);
inline std::string shortName(const std::string& name, size_t max_chars) { return fitName(nameForms(name), max_chars); }

// The forms of a trace's names, computed once per name when first asked for (the UI thread's cache).
class NameForms {
 public:
  const std::vector<std::string>& of(uint32_t id, const std::vector<std::string>& names);
  const std::string& full(uint32_t id, const std::vector<std::string>& names) { return entry(id, names).full; }
  std::string fit(uint32_t id, const std::vector<std::string>& names, size_t max_chars) {
    return fitName(of(id, names), max_chars);
  }
  void clear() { cache_.clear(); }

 private:
  struct Entry {
    std::string full;                // demangled
    std::vector<std::string> forms;  // nameForms
  };
  const Entry& entry(uint32_t id, const std::vector<std::string>& names);
  std::unordered_map<uint32_t, Entry> cache_;
};

}  // namespace trainscope::viewer
