// Where a checkpoint keeps its vocabulary: tiktoken.model beside safetensors shards, or the
// tokenizer.ggml.* keys of a GGUF file.
#pragma once

#include <filesystem>

#include "model/config.h"
#include "model/checkpoint/gguf.h"
#include "model/tokenizer/gguf_vocab.h"
#include "model/tokenizer/tokenizer.h"

namespace k3::model {

// `path`: a checkpoint directory (tiktoken.model, or a .gguf inside) or a .gguf file.
Tokenizer open_tokenizer(const std::filesystem::path& path);

// The same, checked against the model it feeds: every id the tokenizer can produce (its base
// vocabulary and the reserved special ids after it) needs an embedding row, so the tokenizer
// may not be larger than config.vocab_size. InputError naming the tokenizer's file otherwise.
// Pre-flight runs it, so --plan-only and --load-only refuse a broken tokenizer too.
Tokenizer open_tokenizer(const std::filesystem::path& path, const ModelConfig& config);

// The tokenizer keys of a GGUF header; a missing key or wrong type names the file and key.
GgufTokenizer gguf_tokenizer_arrays(const GgufFile& file);

}  // namespace k3::model
