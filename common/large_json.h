// The second JSON door, for documents of many megabytes that the control plane reads on its
// critical path: safetensors headers (a full Kimi-K3 checkpoint has 746,618 tensor entries in
// 351 of them), model.safetensors.index.json and the ModelSlim description. simdjson's DOM
// parses them about ten times faster than nlohmann-json; the contract is the same as
// common/json.h: any failure is one InputError naming the file.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include <simdjson.h>

#include "common/error.h"
#include "common/json.h"

namespace k3 {

class LargeJson {
 public:
  // Parses `text`. A rejected document gets parse_json's message ("invalid JSON at line L,
  // column C: ..."), from a second parse by nlohmann-json that only a bad file pays for.
  LargeJson(std::string_view text, const JsonSource& source);
  LargeJson(const LargeJson&) = delete;
  LargeJson& operator=(const LargeJson&) = delete;

  simdjson::dom::element root() const { return root_; }

 private:
  simdjson::dom::parser parser_;
  simdjson::dom::element root_;
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
