// libFuzzer target: the safetensors header reader on arbitrary bytes (the input is a whole file).
#include <cstddef>
#include <cstdint>
#include <span>

#include "model/checkpoint/safetensors.h"
#include "common/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    k3::model::parse_safetensors_header(std::span<const std::uint8_t>(data, size), size,
                                        "fuzz.safetensors");
  } catch (const k3::InputError&) {
    // Rejecting bad input with a message is the expected outcome; anything else is a finding.
  }
  return 0;
}
