// notes.cpp — see notes.h.
#include "trainscope/viewer/notes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/json_text.h"

namespace trainscope::viewer {

void Notes::addBookmark(int64_t at_ns, std::string label) {
  Bookmark b{at_ns, std::move(label)};
  bookmarks.insert(std::upper_bound(bookmarks.begin(), bookmarks.end(), b,
                                    [](const Bookmark& x, const Bookmark& y) { return x.at_ns < y.at_ns; }),
                   std::move(b));
}

void Notes::setNote(const EventNote& n) {
  notes.erase(std::remove_if(notes.begin(), notes.end(),
                             [&](const EventNote& o) {
                               return o.rank == n.rank && o.track == n.track && o.name == n.name && o.start_ns == n.start_ns;
                             }),
              notes.end());
  if (!n.text.empty()) notes.push_back(n);
}

const EventNote* Notes::noteOn(int64_t rank, const std::string& track, const std::string& name, int64_t start_ns) const {
  for (const auto& o : notes)
    if (o.rank == rank && o.track == track && o.name == name && o.start_ns == start_ns) return &o;
  return nullptr;
}

std::string notesPath(const std::string& run_path) { return run_path + ".notes.json"; }

std::string toJson(const Notes& n) {
  nlohmann::json j;
  j["trainscope_notes"] = 1;  // the format's version
  j["bookmarks"] = nlohmann::json::array();
  for (const auto& b : n.bookmarks) j["bookmarks"].push_back({{"at_ns", b.at_ns}, {"label", b.label}});
  j["notes"] = nlohmann::json::array();
  for (const auto& e : n.notes)
    j["notes"].push_back(
        {{"rank", e.rank}, {"track", e.track}, {"name", e.name}, {"start_ns", e.start_ns}, {"text", e.text}});
  return jsonText(j, 1) + "\n";
}

Notes notesFromJson(const std::string& text, const std::string& file) {
  const std::string fix = "fix or remove " + file + " (it holds the viewer's bookmarks and notes)";
  Notes n;
  try {
    const auto j = nlohmann::json::parse(text);
    if (!j.is_object() || j.value("trainscope_notes", 0) != 1)
      throw UserError("notes", file + " is not a trainscope notes file (no \"trainscope_notes\": 1)", fix);
    // A time or rank must be a whole number inside int64: a float (1e30) or an unsigned past 2^63
    // read back as INT64_MIN or wrapped. Refused naming the bookmark or note, never rewritten.
    auto whole = [&](const nlohmann::json& v, const char* key, const std::string& which) {
      const nlohmann::json& x = v.at(key);
      if (!x.is_number_integer() || (x.is_number_unsigned() && x.get<uint64_t>() > uint64_t(INT64_MAX)))
        throw UserError("notes", file + ": " + which + "'s " + key + " is " + jsonText(x) +
                                     ", not a whole number of nanoseconds from -2^63 to 2^63 - 1",
                        fix);
      return x.get<int64_t>();
    };
    int64_t k = 0;
    for (const auto& b : j.value("bookmarks", nlohmann::json::array())) {
      const std::string which = "bookmark " + std::to_string(++k) + " (\"" + b.value("label", "") + "\")";
      n.addBookmark(whole(b, "at_ns", which), b.value("label", ""));
    }
    k = 0;
    for (const auto& e : j.value("notes", nlohmann::json::array())) {
      const std::string which = "note " + std::to_string(++k) + " (\"" + e.value("text", "") + "\")";
      n.notes.push_back({whole(e, "rank", which), e.at("track").get<std::string>(), e.at("name").get<std::string>(),
                         whole(e, "start_ns", which), e.at("text").get<std::string>()});
    }
  } catch (const nlohmann::json::exception& e) {
    throw UserError("notes", file + " cannot be read: " + jsonErrorText(e.what()), fix);
  }
  return n;
}

Notes loadNotes(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return {};
  // A FIFO at the name would block the open forever: regular files only.
  return notesFromJson(files::readTextFile(path, "notes", "remove " + path + " or make it a notes file"), path);
}

void saveNotes(const std::string& path, const Notes& n) {
  files::OutputRule rule;
  rule.field = "notes";
  rule.kind = "trainscope notes file";
  rule.earlier = [](int fd, const std::string&) {  // an earlier notes file: JSON with "trainscope_notes": 1
    std::string text;
    char buf[1 << 14];
    for (ssize_t r; (r = ::read(fd, buf, sizeof buf)) != 0 && text.size() < (size_t(64) << 20);) {
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return false;
      text.append(buf, size_t(r));
    }
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_object()) return false;
    const auto v = j.find("trainscope_notes");
    return v != j.end() && v->is_number_integer() && v->get<int64_t>() == 1;
  };
  files::writeAtomically(path, toJson(n), rule);
}

std::vector<ScriptCommand> parseAppScript(const std::string& text, const std::string& file) {
  const auto ours = [](const std::string& op) {
    return op == "bookmark" || op == "note" || op == "drop" || op == "overlay";
  };
  const auto check = [](const ScriptCommand& c, const std::string& where) {
    const size_t lo = 1, hi = c.op == "overlay" || c.op == "note" ? 1 : 2;
    if (c.args.size() < lo || c.args.size() > hi)
      throw UserError("--script", where + ": " + c.op + " takes " + (lo == hi ? "1" : "1-2") + " argument(s)",
                      "see docs/viewer.md; quote text with spaces: note \"waits for rank 1\"");
    if (c.op == "bookmark") parseTime(c.args[0], "--script " + where);
    if (c.op == "overlay" && c.args[0] != "help" && c.args[0] != "bookmarks" && c.args[0] != "open" && c.args[0] != "none")
      throw UserError("--script", where + ": overlay takes help, bookmarks, open or none", "see docs/viewer.md");
  };
  return parseScriptPart(text, file, ours, check, parseScript);
}

}  // namespace trainscope::viewer
