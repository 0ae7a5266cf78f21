// names.cpp — demangling and Tracy-style shortening of event names (see names.h).
//
// The demangled text is read with a small bracket scanner, not a C++ parser: it tracks the depth
// of <>, (), [] and {} and steps over the two things whose characters are not brackets —
// operator names ("operator<", "operator()", "operator new") and "(anonymous namespace)". Whatever
// it does not understand it leaves as it is: a shortened name may be longer than it could be, never
// wrong about what it keeps.
#include "trainscope/viewer/names.h"

#include <cxxabi.h>

#include <cctype>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_map>

namespace trainscope::viewer {

namespace {

bool ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$'; }
bool opener(char c) { return c == '<' || c == '(' || c == '[' || c == '{'; }
bool closer(char c) { return c == '>' || c == ')' || c == ']' || c == '}'; }

// The length of an atom at i — an operator name or "(anonymous namespace)" — else 0.
size_t atomAt(const std::string& s, size_t i) {
  static const std::string kAnon = "(anonymous namespace)";
  if (s.compare(i, kAnon.size(), kAnon) == 0) return kAnon.size();
  if (s.compare(i, 8, "operator") != 0 || (i > 0 && ident(s[i - 1]))) return 0;
  const size_t j = i + 8;
  if (j >= s.size() || ident(s[j])) return 0;  // "operator" is only the start of an identifier
  if (s.compare(j, 2, "()") == 0 || s.compare(j, 2, "[]") == 0) return 10;
  size_t k = j;
  if (s[j] == ' ') {  // operator new, operator delete[], a conversion: operator int
    for (k = j + 1; k < s.size() && ident(s[k]); ++k) {}
    if (s.compare(k, 2, "[]") == 0) k += 2;
    return k - i;
  }
  while (k < s.size() && k - j < 3 && std::strchr("<>=!+-*/%&|^~,", s[k]) && s[k] != '\0') ++k;
  return k - i;
}

// Where a signature's parts are: [return type ' '] name [<template args>] (params) [qualifiers].
struct Signature {
  size_t name = 0;                      // where the name begins (after the return type)
  size_t params = std::string::npos;    // the parameter list's '(' (npos: not a signature)
};

Signature signatureOf(const std::string& s) {
  Signature sig;
  int depth = 0;
  size_t last_space = std::string::npos;
  bool after_name = false;  // the last thing at depth 0 ends a name: an identifier, '>', an atom
  size_t atom_end = std::string::npos;
  for (size_t i = 0; i < s.size();) {
    if (const size_t a = atomAt(s, i)) {
      i += a;
      atom_end = i;
      if (depth == 0) after_name = true;
      continue;
    }
    const char c = s[i];
    if (c == ' ' && i == atom_end) {  // "operator< <int>": the space belongs to the operator
      ++i;
      continue;
    }
    if (depth == 0 && c == '(' && after_name) {
      sig.params = i;
      break;
    }
    if (opener(c)) ++depth;
    else if (closer(c) && depth > 0) --depth;
    if (depth == 0) {
      if (c == ' ') last_space = i;
      after_name = ident(c) || c == '>';
    }
    ++i;
  }
  // A return type only before a name that has a parameter list, and only when a name follows it.
  if (sig.params != std::string::npos && last_space != std::string::npos && last_space + 1 < sig.params)
    sig.name = last_space + 1;
  return sig;
}

// Namespaces and classes that qualify a name dropped, at every depth: "at::native::Foo<at::Bar>" →
// "Foo<Bar>"; "A::f(int)::{lambda()#1}" → "{lambda()#1}".
std::string stripQualifiers(const std::string& s) {
  std::string out;
  std::vector<size_t> term{0};  // where the current term began in `out`, per bracket depth
  for (size_t i = 0; i < s.size();) {
    if (const size_t a = atomAt(s, i)) {
      out.append(s, i, a);
      i += a;
      continue;
    }
    const char c = s[i];
    if (c == ':' && i + 1 < s.size() && s[i + 1] == ':') {
      out.resize(term.back());
      i += 2;
      continue;
    }
    out += c;
    ++i;
    if (opener(c)) {
      term.push_back(out.size());
    } else if (closer(c)) {
      if (term.size() > 1) term.pop_back();
    } else if (c == ',' || (c == ' ' && term.size() == 1)) {
      while (i < s.size() && s[i] == ' ') out += s[i++];
      term.back() = out.size();
    }
  }
  return out;
}

// Template arguments from angle depth `keep` + 1 on replaced: by "<...>" when keep > 0, else dropped.
std::string collapseTemplates(const std::string& s, int keep) {
  std::string out;
  int angle = 0;
  for (size_t i = 0; i < s.size();) {
    if (const size_t a = atomAt(s, i)) {
      if (angle <= keep) out.append(s, i, a);
      i += a;
      continue;
    }
    const char c = s[i++];
    if (c == '<') {
      ++angle;
      if (angle == keep + 1 && keep > 0) out += "<...>";
      if (angle <= keep) out += c;
    } else if (c == '>' && angle > 0) {
      if (angle <= keep) out += c;
      --angle;
    } else if (angle <= keep) {
      out += c;
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// The first template argument of s ("Kernel2<X<A>, 4>" → "X<A>"), trimmed; empty when s has none.
std::string firstTemplateArg(const std::string& s) {
  const size_t open = s.find('<');
  if (open == std::string::npos) return {};
  int depth = 0;
  size_t i = open + 1;
  for (; i < s.size(); ++i) {
    if (const size_t a = atomAt(s, i)) {
      i += a - 1;
      continue;
    }
    const char c = s[i];
    if (opener(c)) ++depth;
    else if (closer(c) && depth == 0) break;
    else if (closer(c)) --depth;
    else if (c == ',' && depth == 0) break;
  }
  std::string arg = s.substr(open + 1, i - open - 1);
  while (!arg.empty() && arg.front() == ' ') arg.erase(0, 1);
  while (!arg.empty() && arg.back() == ' ') arg.pop_back();
  return arg;
}

// Templates that only wrap the work they run: their name says nothing, their first argument does.
bool wrapperTemplate(const std::string& base) {
  static const char* const kWrappers[] = {"Kernel", "Kernel2", "device_kernel", "CppNode"};
  for (const char* w : kWrappers)
    if (base == w) return true;
  return false;
}

}  // namespace

std::string demangle(const std::string& name) {
  if (name.size() < 3 || name.compare(0, 2, "_Z") != 0) return name;
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), std::free);
  return status == 0 && out ? std::string(out.get()) : name;
}

std::vector<std::string> nameForms(const std::string& raw) {
  std::vector<std::string> forms;
  auto add = [&](std::string f) {
    if (!f.empty() && (forms.empty() || forms.back() != f)) forms.push_back(std::move(f));
  };
  const std::string full = demangle(raw);
  const Signature sig = signatureOf(full);
  std::string s = full.substr(sig.name);  // without the return type
  add(s);
  if (sig.params != std::string::npos) {
    s = full.substr(sig.name, sig.params - sig.name);  // without the parameter list
    add(s);
  }
  s = stripQualifiers(s);
  add(s);
  if (wrapperTemplate(collapseTemplates(s, 0))) {  // Kernel2<cutlass_80_..._nn_align4>(Params) → the argument
    const std::string arg = firstTemplateArg(s);
    if (!arg.empty() && (std::isalpha(static_cast<unsigned char>(arg[0])) || arg[0] == '_')) {
      add(arg);
      add(collapseTemplates(arg, 1));
      add(collapseTemplates(arg, 0));
      return forms;
    }
  }
  add(collapseTemplates(s, 1));
  add(collapseTemplates(s, 0));
  if (forms.empty()) forms.push_back(raw);
  return forms;
}

std::string fitName(const std::vector<std::string>& forms, size_t max_chars, const std::string& suffix) {
  if (forms.empty()) return {};
  for (const auto& f : forms)
    if (f.size() <= max_chars) return f;
  if (max_chars < 4 + suffix.size()) return {};
  std::string last = forms.back();
  if (!suffix.empty() && last.size() >= suffix.size() && last.compare(last.size() - suffix.size(), suffix.size(), suffix) == 0)
    last.resize(last.size() - suffix.size());
  size_t cut = max_chars - 3 - suffix.size();
  while (cut > 0 && (static_cast<unsigned char>(last[cut]) & 0xc0) == 0x80) --cut;  // not inside a UTF-8 character
  return last.substr(0, cut) + "..." + suffix;
}

std::vector<std::string> distinguish(std::vector<std::vector<std::string>>& forms) {
  std::vector<std::string> suffixes(forms.size());
  // Names whose shortest forms meet are one group; within it, each distinct longest form is one name.
  std::unordered_map<std::string, std::vector<size_t>> by_short;
  for (size_t i = 0; i < forms.size(); ++i)
    if (!forms[i].empty()) by_short[forms[i].back()].push_back(i);
  for (auto& [shortest, ids] : by_short) {
    if (ids.size() < 2) continue;
    std::sort(ids.begin(), ids.end(), [&](size_t a, size_t b) { return forms[a].front() < forms[b].front(); });
    std::vector<int> number(ids.size());
    int n = 0;
    for (size_t k = 0; k < ids.size(); ++k)
      number[k] = (k > 0 && forms[ids[k]].front() == forms[ids[k - 1]].front()) ? n : ++n;
    if (n < 2) continue;  // one name, recorded under spellings that read alike
    std::unordered_map<std::string, int> owner;  // a form → the number of the one name that has it, or -1
    for (size_t k = 0; k < ids.size(); ++k)
      for (const auto& f : forms[ids[k]]) {
        auto [it, fresh] = owner.emplace(f, number[k]);
        if (!fresh && it->second != number[k]) it->second = -1;
      }
    for (size_t k = 0; k < ids.size(); ++k) {
      const std::string suffix = " #" + std::to_string(number[k]);
      for (auto& f : forms[ids[k]])
        if (owner[f] == -1) f += suffix;
      suffixes[ids[k]] = suffix;
    }
  }
  return suffixes;
}

const std::vector<std::string>& NameForms::of(uint32_t id, const std::vector<std::string>& names) {
  return entry(id, names).forms;
}

std::string NameForms::fit(uint32_t id, const std::vector<std::string>& names, size_t max_chars) {
  const Entry& e = entry(id, names);
  return fitName(e.forms, max_chars, e.suffix);
}

const NameForms::Entry& NameForms::entry(uint32_t id, const std::vector<std::string>& names) {
  if (built_for_ != names.size() || cache_.size() != names.size()) {  // every name at once: a suffix needs them all
    cache_.clear();
    std::vector<std::vector<std::string>> forms(names.size());
    for (size_t i = 0; i < names.size(); ++i) forms[i] = nameForms(names[i]);
    const std::vector<std::string> suffixes = distinguish(forms);
    cache_.reserve(names.size());
    for (size_t i = 0; i < names.size(); ++i) cache_.push_back(Entry{demangle(names[i]), std::move(forms[i]), suffixes[i]});
    built_for_ = names.size();
  }
  static const Entry kNone{};
  return id < cache_.size() ? cache_[id] : kNone;
}

}  // namespace trainscope::viewer
