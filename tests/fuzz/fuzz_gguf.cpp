// libFuzzer target: the GGUF header reader on arbitrary bytes (the input is a whole file).
#include <cstddef>
#include <cstdint>
#include <span>

#include "model/gguf.h"
#include "quant/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    k3::model::parse_gguf_header(std::span<const std::uint8_t>(data, size), size, "fuzz.gguf");
  } catch (const k3::InputError&) {
  }
  return 0;
}
