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
#include <cstring>
#include <memory>

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
  add(collapseTemplates(s, 1));
  add(collapseTemplates(s, 0));
  if (forms.empty()) forms.push_back(raw);
  return forms;
}

std::string fitName(const std::vector<std::string>& forms, size_t max_chars) {
  if (forms.empty()) return {};
  for (const auto& f : forms)
    if (f.size() <= max_chars) return f;
  if (max_chars < 4) return {};
  const std::string& last = forms.back();
  size_t cut = max_chars - 3;
  while (cut > 0 && (static_cast<unsigned char>(last[cut]) & 0xc0) == 0x80) --cut;  // not inside a UTF-8 character
  return last.substr(0, cut) + "...";
}

const std::vector<std::string>& NameForms::of(uint32_t id, const std::vector<std::string>& names) {
  return entry(id, names).forms;
}

const NameForms::Entry& NameForms::entry(uint32_t id, const std::vector<std::string>& names) {
  auto it = cache_.find(id);
  if (it == cache_.end()) {
    const std::string& raw = id < names.size() ? names[id] : std::string();
    it = cache_.emplace(id, Entry{demangle(raw), nameForms(raw)}).first;
  }
  return it->second;
}

}  // namespace trainscope::viewer
