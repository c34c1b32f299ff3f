// libFuzzer target: config.json as the job reads it (one JSON document through common/json.h,
// then the Kimi-K3 / DSpark config reader and its validation).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/error.h"
#include "common/json.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    k3::read_json(text, {"fuzz/config.json"}, [](const nlohmann::json& root) {
      return k3::model::parse_config_json(root, "fuzz/config.json");
    });
  } catch (const k3::InputError&) {
  }
  return 0;
}
