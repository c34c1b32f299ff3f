#include "common/large_json.h"

#include <cstring>

namespace k3 {

LargeJson::LargeJson(std::string_view text, const JsonSource& source, Padding padding) {
  const simdjson::error_code error =
      parser_.parse(text.data(), text.size(), padding == Padding::kCopy).get(root_);
  if (!error) return;
  parse_json(text, source);  // throws the positioned message when nlohmann-json agrees
  throw InputError(source.where + ": invalid JSON: " + simdjson::error_message(error) +
                   (source.expected.empty() ? "" : "; " + std::string(source.expected)));
}

PaddedBuffer::PaddedBuffer(std::size_t size)
    : bytes_(new char[size + LargeJson::kPadding]), size_(size) {  // no zero-fill: read over
  std::memset(bytes_.get() + size, 0, LargeJson::kPadding);
}

}  // namespace k3
