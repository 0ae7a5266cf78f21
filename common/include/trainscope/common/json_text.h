// trainscope/common/json_text.h — the one way trainscope turns a JSON value into text.
//
// Strings trainscope writes come from places it does not control (an op name in a database, the
// StringIds of an Nsight export, a path): nlohmann::json's dump() throws on bytes that are not
// UTF-8. jsonText replaces each invalid byte with U+FFFD instead, so every report, export, layout,
// study value and message is written whole. A template, so that common/ needs no nlohmann.
#pragma once

#include <string>

namespace trainscope {

// `j` as JSON text: compact (indent -1) or indented by `indent` spaces; invalid UTF-8 replaced.
template <class Json>
std::string jsonText(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

// nlohmann's message for a user ("parse error at line 1, column 9: syntax error while parsing
// value - invalid literal; last read: '{oo'") without its "[json.exception.parse_error.101] " tag,
// which is for programmers.
inline std::string jsonErrorText(const std::string& what) {
  const size_t open = what.rfind("[json.exception.", 0) == 0 ? what.find("] ") : std::string::npos;
  return open == std::string::npos ? what : what.substr(open + 2);
}

// What to add to a JSON parse error at byte `byte` (nlohmann's parse_error::byte, 1-based) of a
// text of `size` bytes: where the error is at the text's end (an object, array or string left
// open), the file was cut short (an interrupted copy, a full disk) or never finished, which a
// reader says rather than only "not valid JSON". "" otherwise.
inline std::string jsonCutShort(size_t byte, size_t size, const std::string& what = "") {
  const bool at_end = what.find("unexpected end of input") != std::string::npos ||
                      what.find("missing closing quote") != std::string::npos;  // a string left open: only at the end
  // The last byte closing an object or array where a key or value was due ({"a": 1,}) is a syntax
  // error in a whole text, not a cut one.
  const bool closes = what.find("unexpected '}'") != std::string::npos || what.find("unexpected ']'") != std::string::npos;
  if (size == 0 || (!at_end && (byte < size || closes))) return "";
  return "; it ends at byte " + std::to_string(size) + " inside the JSON: the file is truncated (cut short) or unfinished";
}

}  // namespace trainscope
