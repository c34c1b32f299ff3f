// libFuzzer target: quant_model_description.json parsing.
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/checkpoint/checkpoint.h"
#include "common/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    k3::model::parse_modelslim_description(std::string(reinterpret_cast<const char*>(data), size),
                                           "fuzz/quant_model_description.json");
  } catch (const k3::InputError&) {
  }
  return 0;
}
