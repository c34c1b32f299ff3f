#include "model/tokenizer_files.h"

#include <algorithm>

#include "model/checkpoint.h"
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

Tokenizer open_tokenizer(const fs::path& path) {
  fs::path gguf;
  if (fs::is_directory(path)) {
    if (fs::exists(path / "tiktoken.model"))
      return Tokenizer(Vocabulary::load_tiktoken(path / "tiktoken.model"));
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path)) {
      if (e.path().extension() == ".gguf") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) throw InputError(path.string() + ": no tiktoken.model and no .gguf file");
    gguf = files.front();
  } else if (path.extension() == ".gguf") {
    gguf = gguf_split_files(path).front();  // the vocabulary lives in the first split
  } else {
    throw InputError(path.string() + ": expected a checkpoint directory or a .gguf file");
  }
  const GgufFile header = read_gguf_header(gguf);
  try {
    return Tokenizer(vocabulary_from_gguf(gguf_tokenizer_arrays(header)));
  } catch (const InputError& e) {
    throw InputError(gguf.string() + ": " + e.what());
  }
}

}  // namespace k3::model
