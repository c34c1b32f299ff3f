#include "model/checkpoint/tokenizer_files.h"

#include <algorithm>

#include "model/checkpoint/checkpoint.h"
#include "common/error.h"

namespace k3::model {

namespace fs = std::filesystem;

GgufTokenizer gguf_tokenizer_arrays(const GgufFile& g) {
  GgufTokenizer t;
  t.model = g.string(std::string(kGgufKeyModel));
  t.pre = g.has(std::string(kGgufKeyPre)) ? g.string(std::string(kGgufKeyPre)) : "";
  t.tokens = g.strings(std::string(kGgufKeyTokens));
  for (auto v : g.integers(std::string(kGgufKeyTokenType)))
    t.token_types.push_back(static_cast<std::int32_t>(v));
  if (g.has(std::string(kGgufKeyMerges))) t.merges = g.strings(std::string(kGgufKeyMerges));
  if (g.has(std::string(kGgufKeyBos))) t.bos_token_id = g.u32(std::string(kGgufKeyBos));
  if (g.has(std::string(kGgufKeyEos))) t.eos_token_id = g.u32(std::string(kGgufKeyEos));
  if (g.has(std::string(kGgufKeyPad))) t.padding_token_id = g.u32(std::string(kGgufKeyPad));
  return t;
}

namespace {

// The file that holds the vocabulary: tiktoken.model, or the first .gguf split.
fs::path tokenizer_file(const fs::path& path) {
  if (fs::is_directory(path)) {
    if (fs::exists(path / "tiktoken.model")) return path / "tiktoken.model";
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path)) {
      if (e.path().extension() == ".gguf") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) {
      throw InputError(path.string() +
                       ": no tokenizer: expected tiktoken.model (or a .gguf file with "
                       "tokenizer.ggml.* keys)");
    }
    return files.front();
  }
  if (path.extension() == ".gguf") return gguf_split_files(path).front();  // keys in split 1
  throw InputError(path.string() + ": expected a checkpoint directory or a .gguf file");
}

Tokenizer read_tokenizer(const fs::path& file) {
  if (file.extension() != ".gguf") return Tokenizer(Vocabulary::load_tiktoken(file));
  const GgufFile header = read_gguf_header(file);
  try {
    return Tokenizer(vocabulary_from_gguf(gguf_tokenizer_arrays(header)));
  } catch (const InputError& e) {
    throw InputError(file.string() + ": " + e.what());
  }
}

}  // namespace

Tokenizer open_tokenizer(const fs::path& path) { return read_tokenizer(tokenizer_file(path)); }

Tokenizer open_tokenizer(const fs::path& path, const ModelConfig& config) {
  const fs::path file = tokenizer_file(path);
  Tokenizer tokenizer = read_tokenizer(file);
  if (tokenizer.size() > config.vocab_size) {
    throw InputError(file.string() + ": the tokenizer has " + std::to_string(tokenizer.size()) +
                     " ids (" + std::to_string(tokenizer.vocabulary().base_size()) +
                     " tokens and " + std::to_string(kReservedSpecialCount) +
                     " reserved special ids), but the model's vocab_size is " +
                     std::to_string(config.vocab_size) + ": ids from " +
                     std::to_string(config.vocab_size) + " on have no embedding row");
  }
  return tokenizer;
}

}  // namespace k3::model
