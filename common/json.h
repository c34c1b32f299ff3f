// The one door through which k3eval reads JSON: every document the job reads from a file (a
// safetensors header, model.safetensors.index.json, config.json, the ModelSlim description, a
// GSM8K or questions.jsonl line, a baseline, a completions dump) is parsed and interpreted here,
// so that whatever nlohmann-json throws on a bad file (parse_error, an out_of_range for a number
// too large, a type_error from get<>) reaches the user as one InputError naming the file, and
// never as an "unexpected error" with exit 3.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace k3 {

struct JsonSource {
  std::string where;               // "<file>" or "<file>:<line>": the message starts with it
  std::string_view expected = {};  // appended as "; <expected>" to a parse error, if not empty
  bool one_line = false;  // a JSONL line: the position is "column C", not "line L, column C"
};

// The reason nlohmann-json gives, without its "[json.exception.<kind>.<id>] " prefix.
std::string json_error_reason(const nlohmann::json::exception& error);

// Parses one JSON value. InputError "<where>: invalid JSON at line L, column C: <reason>[;
// <expected>]" on a syntax error, "<where>: invalid JSON: number overflow parsing '1e99999'[;
// ...]" on a number nlohmann-json cannot hold.
nlohmann::json parse_json(std::string_view text, const JsonSource& source);

// Runs `interpret` over values already parsed; a nlohmann-json exception escaping it (get<> on
// the wrong type, at() on a missing key, dump() of invalid UTF-8) becomes InputError
// "<where>: <reason>". Readers check types and say what they expected first; this is the net
// under them, so a check they forgot is still an input error that names the file.
template <class Interpret>
decltype(auto) interpret_json(const std::string& where, Interpret&& interpret) {
  try {
    return std::forward<Interpret>(interpret)();
  } catch (const nlohmann::json::exception& e) {
    throw InputError(where + ": " + json_error_reason(e));
  }
}

// parse_json, then `interpret(root)` under interpret_json: a reader's whole use of a document.
template <class Interpret>
decltype(auto) read_json(std::string_view text, const JsonSource& source, Interpret&& interpret) {
  const nlohmann::json root = parse_json(text, source);
  return interpret_json(source.where, [&]() -> decltype(auto) { return interpret(root); });
}

// "an object", "an array", "a string", "a number", "a boolean", "null": for "is <type>" messages.
std::string a_json_type(const nlohmann::json& value);

}  // namespace k3
