// Where a checkpoint keeps its vocabulary: tiktoken.model beside safetensors shards, or the
// tokenizer.ggml.* keys of a GGUF file.
#pragma once

#include <filesystem>

#include "model/gguf.h"
#include "model/tokenizer/gguf_vocab.h"
#include "model/tokenizer/tokenizer.h"

namespace k3::model {

// `path`: a checkpoint directory (tiktoken.model, or a .gguf inside) or a .gguf file.
Tokenizer open_tokenizer(const std::filesystem::path& path);

// The tokenizer keys of a GGUF header; a missing key or wrong type names the file and key.
GgufTokenizer gguf_tokenizer_arrays(const GgufFile& file);

}  // namespace k3::model
