// libFuzzer target: tiktoken.model text ("<base64> <rank>" per line) into a vocabulary.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/error.h"
#include "model/tokenizer/vocabulary.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    k3::model::Vocabulary::parse_tiktoken(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/tiktoken.model");
  } catch (const k3::InputError&) {
  }
  return 0;
}
