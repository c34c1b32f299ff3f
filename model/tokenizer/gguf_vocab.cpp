#include "model/tokenizer/gguf_vocab.h"

#include <algorithm>
#include <array>

#include "common/error.h"
#include "common/utf8.h"
#include "model/tokenizer/bpe.h"
#include "model/tokenizer/text_util.h"

namespace k3::model {
namespace {

// bytes_to_unicode maps printable Latin-1 bytes to themselves and the other 68 bytes, in order,
// to U+0100.. (so every mapped code point is below U+0144).
struct Gpt2Table {
  std::array<char32_t, 256> to_unicode{};
  std::array<std::int16_t, 0x144> to_byte{};

  Gpt2Table() {
    to_byte.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
      to_unicode[b] = cp;
      to_byte[cp] = static_cast<std::int16_t>(b);
    }
  }
};

const Gpt2Table& gpt2_table() {
  static const Gpt2Table table;
  return table;
}

std::string key_at(std::string_view key, std::size_t index) {
  return std::string(key) + "[" + std::to_string(index) + "]";
}

const char* type_name(std::int32_t type) {
  switch (static_cast<GgufTokenType>(type)) {
    case GgufTokenType::kNormal:
      return "NORMAL";
    case GgufTokenType::kUnknown:
      return "UNKNOWN";
    case GgufTokenType::kControl:
      return "CONTROL";
    case GgufTokenType::kUserDefined:
      return "USER_DEFINED";
    case GgufTokenType::kUnused:
      return "UNUSED";
    case GgufTokenType::kByte:
      return "BYTE";
  }
  return "an unknown type";
}

std::string describe_type(std::int32_t type) {
  return std::to_string(type) + " (" + type_name(type) + ")";
}

}  // namespace

std::string gpt2_bytes_to_unicode(std::string_view bytes) {
  const Gpt2Table& t = gpt2_table();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) utf8::append(out, t.to_unicode[static_cast<unsigned char>(c)]);
  return out;
}

std::optional<std::string> gpt2_unicode_to_bytes(std::string_view symbols) {
  const Gpt2Table& t = gpt2_table();
  std::string out;
  out.reserve(symbols.size());
  std::size_t i = 0;
  while (i < symbols.size()) {
    const utf8::Step s = utf8::step(symbols.substr(i));
    if (s.kind != utf8::StepKind::kValid || s.code_point >= t.to_byte.size() ||
        t.to_byte[s.code_point] < 0) {
      return std::nullopt;
    }
    out.push_back(static_cast<char>(t.to_byte[s.code_point]));
    i += s.length;
  }
  return out;
}

std::vector<std::string> gguf_merges_from_ranks(const Vocabulary& vocab) {
  std::vector<std::string> merges;
  BpeScratch scratch;
  for (std::int32_t rank = 0; rank < vocab.base_size(); ++rank) {
    const std::string_view token = vocab.token_bytes(rank);
    if (token.size() == 1) continue;
    bpe_merge(vocab, token, scratch, rank);
    if (scratch.parts.size() != 2) continue;
    const std::size_t split = scratch.parts[1].start;
    merges.push_back(gpt2_bytes_to_unicode(token.substr(0, split)) + " " +
                     gpt2_bytes_to_unicode(token.substr(split)));
  }
  return merges;
}

GgufTokenizer to_gguf_tokenizer(const Vocabulary& vocab, std::int32_t vocab_size) {
  const std::int32_t n = vocab.base_size();
  if (vocab_size == 0) vocab_size = vocab.size();
  if (vocab_size < vocab.size()) {
    throw InputError("GGUF vocab_size " + std::to_string(vocab_size) +
                     " is smaller than the vocabulary (" + std::to_string(vocab.size()) +
                     " ids including the 256 specials)");
  }
  GgufTokenizer g;
  g.model = kGgufTokenizerModel;
  g.pre = kGgufTokenizerPre;
  g.tokens.reserve(static_cast<std::size_t>(vocab_size));
  g.token_types.reserve(static_cast<std::size_t>(vocab_size));
  for (std::int32_t r = 0; r < n; ++r) {
    g.tokens.push_back(gpt2_bytes_to_unicode(vocab.token_bytes(r)));
    g.token_types.push_back(static_cast<std::int32_t>(GgufTokenType::kNormal));
  }
  for (const std::string& name : vocab.special_names()) {
    g.tokens.push_back(name);
    g.token_types.push_back(static_cast<std::int32_t>(GgufTokenType::kControl));
  }
  for (std::int32_t id = vocab.size(); id < vocab_size; ++id) {
    g.tokens.push_back("[PAD" + std::to_string(id) + "]");
    g.token_types.push_back(static_cast<std::int32_t>(GgufTokenType::kUnused));
  }
  g.merges = gguf_merges_from_ranks(vocab);
  g.bos_token_id = static_cast<std::uint32_t>(n + kBosOffset);
  g.eos_token_id = static_cast<std::uint32_t>(n + kEndOfMsgOffset);
  g.padding_token_id = static_cast<std::uint32_t>(n + kPadOffset);
  return g;
}

Vocabulary vocabulary_from_gguf(const GgufTokenizer& g, GgufMergesCheck check) {
  if (g.model != kGgufTokenizerModel) {
    throw InputError(std::string(kGgufKeyModel) + " is '" + printable(g.model) + "', expected '" +
                     std::string(kGgufTokenizerModel) + "' (Kimi-K3's byte-level BPE)");
  }
  if (g.pre != kGgufTokenizerPre) {
    throw InputError(std::string(kGgufKeyPre) + " is '" + printable(g.pre) + "', expected '" +
                     std::string(kGgufTokenizerPre) + "' (Kimi's pre-tokenizer)");
  }
  if (g.tokens.size() != g.token_types.size()) {
    throw InputError(std::string(kGgufKeyTokens) + " has " + std::to_string(g.tokens.size()) +
                     " entries but " + std::string(kGgufKeyTokenType) + " has " +
                     std::to_string(g.token_types.size()));
  }

  // Layout: NORMAL base tokens (id = rank), then the 256 CONTROL specials, then UNUSED padding.
  const auto normal = static_cast<std::int32_t>(GgufTokenType::kNormal);
  const auto control = static_cast<std::int32_t>(GgufTokenType::kControl);
  const auto unused = static_cast<std::int32_t>(GgufTokenType::kUnused);
  std::size_t n = 0;
  while (n < g.tokens.size() && g.token_types[n] == normal) ++n;
  if (n == 0) throw InputError(std::string(kGgufKeyTokenType) + " has no NORMAL token at id 0");
  for (std::size_t i = n; i < g.tokens.size(); ++i) {
    const bool in_specials = i < n + kReservedSpecialCount;
    const std::int32_t expected = in_specials ? control : unused;
    if (g.token_types[i] != expected) {
      throw InputError(key_at(kGgufKeyTokenType, i) + " is " + describe_type(g.token_types[i]) +
                       ", expected " + describe_type(expected) +
                       (in_specials ? " (Kimi-K3's 256 specials follow the " + std::to_string(n) +
                                          " NORMAL tokens)"
                                    : " (only padding follows the specials)"));
    }
  }
  if (g.tokens.size() < n + kReservedSpecialCount) {
    throw InputError(std::string(kGgufKeyTokens) + " has " + std::to_string(g.tokens.size()) +
                     " entries, expected at least " + std::to_string(n + kReservedSpecialCount) +
                     " (" + std::to_string(n) + " NORMAL tokens and 256 specials)");
  }

  std::vector<std::string> ranked;
  ranked.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::optional<std::string> bytes = gpt2_unicode_to_bytes(g.tokens[i]);
    if (!bytes || bytes->empty()) {
      throw InputError(key_at(kGgufKeyTokens, i) + " '" + printable(g.tokens[i]) +
                       "' is not a string of GPT-2 byte symbols");
    }
    ranked.push_back(std::move(*bytes));
  }
  Vocabulary vocab = Vocabulary::from_ranked_tokens(ranked, kGgufKeyTokens);

  for (std::int32_t k = 0; k < kReservedSpecialCount; ++k) {
    const std::size_t id = n + static_cast<std::size_t>(k);
    const std::string& expected = vocab.special_names()[k];
    if (g.tokens[id] != expected) {
      throw InputError(key_at(kGgufKeyTokens, id) + " is '" + printable(g.tokens[id]) +
                       "', expected '" + expected + "' (Kimi-K3 special token base + " +
                       std::to_string(k) + ")");
    }
  }

  if (check == GgufMergesCheck::kExact) {
    const std::vector<std::string> expected = gguf_merges_from_ranks(vocab);
    const std::size_t common = std::min(expected.size(), g.merges.size());
    for (std::size_t i = 0; i < common; ++i) {
      if (g.merges[i] != expected[i]) {
        throw InputError(key_at(kGgufKeyMerges, i) + " is '" + printable(g.merges[i]) +
                         "', expected '" + printable(expected[i]) + "' from the token ranks");
      }
    }
    if (g.merges.size() != expected.size()) {
      throw InputError(std::string(kGgufKeyMerges) + " has " + std::to_string(g.merges.size()) +
                       " entries, the token ranks give " + std::to_string(expected.size()));
    }
  } else {
    for (std::size_t i = 0; i < g.merges.size(); ++i) {
      const std::string& m = g.merges[i];
      const std::size_t space = m.find(' ');
      std::optional<std::string> left, right;
      if (space != std::string::npos && m.find(' ', space + 1) == std::string::npos) {
        left = gpt2_unicode_to_bytes(std::string_view(m).substr(0, space));
        right = gpt2_unicode_to_bytes(std::string_view(m).substr(space + 1));
      }
      if (!left || !right || left->empty() || right->empty() || vocab.rank_of(*left) < 0 ||
          vocab.rank_of(*right) < 0 || vocab.rank_of(*left + *right) < 0) {
        throw InputError(key_at(kGgufKeyMerges, i) + " '" + printable(m) +
                         "' is not 'left right' with left, right and their join all tokens");
      }
    }
  }

  const auto check_id = [&](const std::optional<std::uint32_t>& id, std::string_view key) {
    if (id && *id >= g.tokens.size()) {
      throw InputError(std::string(key) + " is " + std::to_string(*id) + ", outside the " +
                       std::to_string(g.tokens.size()) + " tokens");
    }
  };
  check_id(g.bos_token_id, kGgufKeyBos);
  check_id(g.eos_token_id, kGgufKeyEos);
  check_id(g.padding_token_id, kGgufKeyPad);
  return vocab;
}

}  // namespace k3::model
