// libFuzzer target: the GGUF header reader on arbitrary bytes (the input is a whole file), and
// what the job reads from a header that parses: the model config from its keys and tensors,
// and the tokenizer arrays and vocabulary.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>

#include "common/error.h"
#include "model/checkpoint/checkpoint.h"
#include "model/checkpoint/gguf.h"
#include "model/checkpoint/tokenizer_files.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  k3::model::GgufFile file;
  try {
    file = k3::model::parse_gguf_header(std::span<const std::uint8_t>(data, size), size,
                                        "fuzz.gguf");
  } catch (const k3::InputError&) {
    return 0;
  }
  try {
    std::unordered_map<std::string_view, const k3::model::TensorEntry*> tensors;
    for (const auto& t : file.tensors) tensors.emplace(t.name, &t);
    k3::model::config_from_gguf(file, [&](std::string_view name) {
      const auto it = tensors.find(name);
      return it == tensors.end() ? nullptr : it->second;
    });
  } catch (const k3::InputError&) {
  }
  try {
    k3::model::vocabulary_from_gguf(k3::model::gguf_tokenizer_arrays(file));
  } catch (const k3::InputError&) {
  }
  return 0;
}
