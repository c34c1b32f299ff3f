// The second JSON door, for documents of many megabytes that the control plane reads on its
// critical path: safetensors headers (a full Kimi-K3 checkpoint has 746,618 tensor entries in
// 351 of them), model.safetensors.index.json and the ModelSlim description. simdjson's DOM
// parses them about ten times faster than nlohmann-json; the contract is the same as
// common/json.h: any failure is one InputError naming the file.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <simdjson.h>

#include "common/error.h"
#include "common/json.h"

namespace k3 {

class LargeJson {
 public:
  // simdjson reads up to kPadding bytes past the end of a document. A caller whose buffer has
  // that many readable bytes after `text` says kInPlace and the text is parsed where it is;
  // otherwise (kCopy) it is first copied into a padded buffer. For a file of 86 MB the copy and
  // its fresh pages cost a tenth of a second.
  static constexpr std::size_t kPadding = simdjson::SIMDJSON_PADDING;
  enum class Padding { kCopy, kInPlace };

  // Parses `text`. A rejected document gets parse_json's message ("invalid JSON at line L,
  // column C: ..."), from a second parse by nlohmann-json that only a bad file pays for.
  LargeJson(std::string_view text, const JsonSource& source, Padding padding = Padding::kCopy);
  LargeJson(const LargeJson&) = delete;
  LargeJson& operator=(const LargeJson&) = delete;

  simdjson::dom::element root() const { return root_; }

 private:
  simdjson::dom::parser parser_;
  simdjson::dom::element root_;
};

// A buffer of `size` bytes followed by LargeJson::kPadding zero bytes, not zero-filled itself
// (the caller reads a file into data()); view() is the text to parse with Padding::kInPlace.
class PaddedBuffer {
 public:
  explicit PaddedBuffer(std::size_t size);
  char* data() { return bytes_.get(); }
  std::string_view view() const { return {bytes_.get(), size_}; }

 private:
  std::unique_ptr<char[]> bytes_;
  std::size_t size_ = 0;
};

// Runs `interpret` over simdjson values; a simdjson_error escaping it (a value of another type
// than the accessor asked for) becomes InputError "<where>: <simdjson's message>".
template <class Interpret>
decltype(auto) interpret_large_json(const std::string& where, Interpret&& interpret) {
  try {
    return std::forward<Interpret>(interpret)();
  } catch (const simdjson::simdjson_error& e) {
    throw InputError(where + ": " + e.what());
  }
}

}  // namespace k3
