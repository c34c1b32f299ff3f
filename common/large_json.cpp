#include "common/large_json.h"

namespace k3 {

LargeJson::LargeJson(std::string_view text, const JsonSource& source) {
  const simdjson::error_code error = parser_.parse(text.data(), text.size()).get(root_);
  if (!error) return;
  parse_json(text, source);  // throws the positioned message when nlohmann-json agrees
  throw InputError(source.where + ": invalid JSON: " + simdjson::error_message(error) +
                   (source.expected.empty() ? "" : "; " + std::string(source.expected)));
}

std::string a_json_type(simdjson::dom::element value) {
  switch (value.type()) {
    case simdjson::dom::element_type::OBJECT:
      return "an object";
    case simdjson::dom::element_type::ARRAY:
      return "an array";
    case simdjson::dom::element_type::STRING:
      return "a string";
    case simdjson::dom::element_type::INT64:
    case simdjson::dom::element_type::UINT64:
    case simdjson::dom::element_type::DOUBLE:
      return "a number";
    case simdjson::dom::element_type::BOOL:
      return "a boolean";
    case simdjson::dom::element_type::NULL_VALUE:
      return "null";
  }
  return "a value";
}

}  // namespace k3
