#include "common/json.h"

namespace k3 {

std::string json_error_reason(const nlohmann::json::exception& error) {
  std::string reason = error.what();
  if (reason.starts_with("[json.exception.")) {
    const std::size_t close = reason.find("] ");
    if (close != std::string::npos) reason.erase(0, close + 2);
  }
  return reason;
}

nlohmann::json parse_json(std::string_view text, const JsonSource& source) {
  const std::string expected = source.expected.empty() ? "" : "; " + std::string(source.expected);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // The reason reads "parse error at line 1, column 5: <what>"; the file (and for JSONL the
    // line) is ours, so keep the position and the parser's words only.
    std::string reason = json_error_reason(e);
    std::string at;
    const std::size_t start = reason.find("parse error at ");
    const std::size_t colon = start == std::string::npos ? start : reason.find(": ", start);
    if (colon != std::string::npos) {
      at = reason.substr(start + 15, colon - start - 15);
      reason = reason.substr(colon + 2);
      if (source.one_line && at.starts_with("line 1, ")) at = at.substr(8);
      at = " at " + at;
    }
    throw InputError(source.where + ": invalid JSON" + at + ": " + reason + expected);
  } catch (const nlohmann::json::exception& e) {
    // out_of_range.406 ("number overflow parsing '1e99999'") and whatever else the parser or a
    // callback throws: the text is not a document we can hold.
    throw InputError(source.where + ": invalid JSON: " + json_error_reason(e) + expected);
  }
}

std::string a_json_type(const nlohmann::json& value) {
  if (value.is_null()) return "null";
  const std::string name = value.type_name();
  return (name == "object" || name == "array" ? "an " : "a ") + name;
}

}  // namespace k3
