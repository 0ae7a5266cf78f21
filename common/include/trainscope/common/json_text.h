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

}  // namespace trainscope
