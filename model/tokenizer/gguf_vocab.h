// The tokenizer as GGUF stores it, the way llama.cpp's Kimi-K3 converter writes it
// (conversion/kimi_k3.py, which borrows kimi_linear.py's set_vocab), and back.
//
// What the converter writes (all from the tiktoken ranks, see gguf.md and kimi-k3.md):
//   tokenizer.ggml.model        "gpt2"
//   tokenizer.ggml.pre          "kimi-k2" (K3 has K2's vocabulary and pre-tokenizer)
//   tokenizer.ggml.tokens       base tokens as GPT-2 bytes_to_unicode strings (id = rank), then
//                               the 256 specials by name, then "[PAD<id>]" up to config's
//                               vocab_size (none for Kimi-K3: 163584 + 256 = 163840)
//   tokenizer.ggml.token_type   NORMAL (1) for base tokens, CONTROL (3) for all 256 specials,
//                               UNUSED (5) for the padding
//   tokenizer.ggml.merges       "left right" for every multi-byte token, in rank order, whose
//                               lowest-rank merging stopped below its own rank gives exactly two
//                               parts (QwenModel.bpe(ranks, token, max_rank=rank))
//   tokenizer.ggml.bos_token_id        config bos_token_id: [BOS] (base + 0)
//   tokenizer.ggml.eos_token_id        config eos_token_id: <|end_of_msg|> (base + 2); kimi_k3.py
//                                      restores it after kimi_linear.py forced [EOS]
//   tokenizer.ggml.padding_token_id    config pad_token_id: [PAD] (base + 255)
// Reading back rebuilds the ranks from the token strings (id = rank), so the GGUF tokenizer is
// the tiktoken tokenizer, id for id; the merges are checked against the ranks, not used.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/vocabulary.h"

namespace k3::model {

// gguf-py's TokenType values.
enum class GgufTokenType : std::int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

inline constexpr std::string_view kGgufKeyModel = "tokenizer.ggml.model";
inline constexpr std::string_view kGgufKeyPre = "tokenizer.ggml.pre";
inline constexpr std::string_view kGgufKeyTokens = "tokenizer.ggml.tokens";
inline constexpr std::string_view kGgufKeyTokenType = "tokenizer.ggml.token_type";
inline constexpr std::string_view kGgufKeyMerges = "tokenizer.ggml.merges";
inline constexpr std::string_view kGgufKeyBos = "tokenizer.ggml.bos_token_id";
inline constexpr std::string_view kGgufKeyEos = "tokenizer.ggml.eos_token_id";
inline constexpr std::string_view kGgufKeyPad = "tokenizer.ggml.padding_token_id";

inline constexpr std::string_view kGgufTokenizerModel = "gpt2";
inline constexpr std::string_view kGgufTokenizerPre = "kimi-k2";

// The tokenizer keys of one GGUF file (the ids are UINT32 in the file).
struct GgufTokenizer {
  std::string model;
  std::string pre;
  std::vector<std::string> tokens;
  std::vector<std::int32_t> token_types;
  std::vector<std::string> merges;
  std::optional<std::uint32_t> bos_token_id;
  std::optional<std::uint32_t> eos_token_id;
  std::optional<std::uint32_t> padding_token_id;
};

// What the converter writes for `vocab`. `vocab_size` is config.json's vocab_size; 0 means
// base + 256 (Kimi-K3's own relation). A larger one is padded with "[PAD<id>]" UNUSED tokens.
GgufTokenizer to_gguf_tokenizer(const Vocabulary& vocab, std::int32_t vocab_size = 0);

// tokenizer.ggml.merges recovered from the ranks, as the converter does.
std::vector<std::string> gguf_merges_from_ranks(const Vocabulary& vocab);

enum class GgufMergesCheck {
  kExact,       // merges must equal gguf_merges_from_ranks() of the tokens (the default)
  kStructural,  // each merge must be "left right" with left, right and left+right tokens
};

// Rebuilds the vocabulary from the GGUF arrays. Everything is checked: model and pre names,
// the token_type layout (NORMAL..., 256 CONTROL, UNUSED...), every GPT-2 symbol, the special
// names, the merges, the special ids. Errors are InputError naming the key and index.
Vocabulary vocabulary_from_gguf(const GgufTokenizer& gguf,
                                GgufMergesCheck check = GgufMergesCheck::kExact);
inline Tokenizer tokenizer_from_gguf(const GgufTokenizer& gguf,
                                     GgufMergesCheck check = GgufMergesCheck::kExact) {
  return Tokenizer(vocabulary_from_gguf(gguf, check));
}

// GPT-2's bytes_to_unicode: every byte as one printable code point ("Ġ" for a space).
std::string gpt2_bytes_to_unicode(std::string_view bytes);
// The inverse; nullopt if `symbols` is not valid UTF-8 or holds a code point outside the map.
std::optional<std::string> gpt2_unicode_to_bytes(std::string_view symbols);

}  // namespace k3::model
