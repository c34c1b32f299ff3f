#include "common/large_json.h"

namespace k3 {

LargeJson::LargeJson(std::string_view text, const JsonSource& source) {
  const simdjson::error_code error = parser_.parse(text.data(), text.size()).get(root_);
  if (!error) return;
  parse_json(text, source);  // throws the positioned message when nlohmann-json agrees
  throw InputError(source.where + ": invalid JSON: " + simdjson::error_message(error) +
                   (source.expected.empty() ? "" : "; " + std::string(source.expected)));
}

}  // namespace k3
