#include "model/tokenizer/gguf_vocab.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "test_support.h"

namespace k3::model {
namespace {

using Strings = std::vector<std::string>;

// ab(256) cd(257) bc(258) abcd(259) " a"(260) aaa(261): specials at 262..517.
Vocabulary handmade() { return test::byte_vocabulary({"ab", "cd", "bc", "abcd", " a", "aaa"}); }

std::string gguf_error(const GgufTokenizer& g, GgufMergesCheck check = GgufMergesCheck::kExact) {
  try {
    vocabulary_from_gguf(g, check);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Gpt2Bytes, MapsEveryByteToOnePrintableCodePoint) {
  EXPECT_EQ(gpt2_bytes_to_unicode(" "), "\xC4\xA0");                             // U+0120 "Ġ"
  EXPECT_EQ(gpt2_bytes_to_unicode("\n"), "\xC4\x8A");                            // U+010A "Ċ"
  EXPECT_EQ(gpt2_bytes_to_unicode(std::string(1, '\0')), "\xC4\x80");            // U+0100
  EXPECT_EQ(gpt2_bytes_to_unicode("\x7F"), "\xC4\xA1");                          // U+0121
  EXPECT_EQ(gpt2_bytes_to_unicode("\xA0"), "\xC5\x82");                          // U+0142
  EXPECT_EQ(gpt2_bytes_to_unicode("\xAD"), "\xC5\x83");                          // U+0143
  EXPECT_EQ(gpt2_bytes_to_unicode("\xE4\xB8\xAD"), "\xC3\xA4\xC2\xB8\xC5\x83");  // "ä¸Ń" (中)
  EXPECT_EQ(gpt2_bytes_to_unicode("Hello!"), "Hello!");
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(gpt2_unicode_to_bytes(gpt2_bytes_to_unicode(all)), all);
  EXPECT_FALSE(gpt2_unicode_to_bytes(" "));         // a raw space is not a symbol
  EXPECT_FALSE(gpt2_unicode_to_bytes("\xC5\x84"));  // U+0144, past the table
  EXPECT_FALSE(gpt2_unicode_to_bytes("\xC4"));      // not UTF-8
}

TEST(GgufVocab, WritesWhatTheConverterWrites) {
  const Vocabulary v = handmade();
  const GgufTokenizer g = to_gguf_tokenizer(v);
  EXPECT_EQ(g.model, "gpt2");
  EXPECT_EQ(g.pre, "kimi-k2");
  ASSERT_EQ(g.tokens.size(), 262u + 256u);
  ASSERT_EQ(g.token_types.size(), g.tokens.size());
  EXPECT_EQ(g.tokens[0], "\xC4\x80");
  EXPECT_EQ(g.tokens[32], "\xC4\xA0");
  EXPECT_EQ(g.tokens['a'], "a");
  EXPECT_EQ(g.tokens[256], "ab");
  EXPECT_EQ(g.tokens[260],
            "\xC4\xA0"
            "a");
  EXPECT_EQ(g.tokens[262], "[BOS]");
  EXPECT_EQ(g.tokens[264], "<|end_of_msg|>");
  EXPECT_EQ(g.tokens[270], "<|reserved_token_270|>");
  EXPECT_EQ(g.tokens[517], "[PAD]");
  for (std::size_t i = 0; i < g.tokens.size(); ++i) {
    EXPECT_EQ(g.token_types[i], i < 262 ? 1 : 3) << i;  // NORMAL, then CONTROL
  }
  // abcd: ab (256) and cd (257) merge below its rank 259, so "ab cd"; aaa has no merge path.
  EXPECT_EQ(g.merges, (Strings{"a b", "c d", "b c", "ab cd", "\xC4\xA0 a"}));
  EXPECT_EQ(g.bos_token_id, 262u);
  EXPECT_EQ(g.eos_token_id, 264u);  // <|end_of_msg|>, config's eos
  EXPECT_EQ(g.padding_token_id, 517u);
}

TEST(GgufVocab, PadsToConfigVocabSize) {
  const GgufTokenizer g = to_gguf_tokenizer(handmade(), 520);
  ASSERT_EQ(g.tokens.size(), 520u);
  EXPECT_EQ(g.tokens[518], "[PAD518]");
  EXPECT_EQ(g.tokens[519], "[PAD519]");
  EXPECT_EQ(g.token_types[519], 5);  // UNUSED
  EXPECT_EQ(vocabulary_from_gguf(g), handmade());
  EXPECT_THROW(to_gguf_tokenizer(handmade(), 500), InputError);
}

TEST(GgufVocab, RoundTripGivesTheSameIds) {
  const Vocabulary v = handmade();
  const GgufTokenizer g = to_gguf_tokenizer(v);
  EXPECT_EQ(vocabulary_from_gguf(g), v);
  const Tokenizer a(handmade());
  const Tokenizer b = tokenizer_from_gguf(g);
  for (const std::string s : {"abcd", " abcd aaa", "abcabc<|end_of_msg|>", "\xFF\xE4\xB8\xAD"}) {
    EXPECT_EQ(a.encode(s, AllowedSpecial::all()), b.encode(s, AllowedSpecial::all())) << s;
  }
}

TEST(GgufVocab, RejectsWrongModelAndPre) {
  GgufTokenizer g = to_gguf_tokenizer(handmade());
  g.model = "llama";
  EXPECT_EQ(gguf_error(g),
            "tokenizer.ggml.model is 'llama', expected 'gpt2' (Kimi-K3's byte-level BPE)");
  g = to_gguf_tokenizer(handmade());
  g.pre = "llama-bpe";
  EXPECT_EQ(gguf_error(g),
            "tokenizer.ggml.pre is 'llama-bpe', expected 'kimi-k2' (Kimi's pre-tokenizer)");
}

TEST(GgufVocab, RejectsBadLayout) {
  GgufTokenizer g = to_gguf_tokenizer(handmade());
  g.token_types[267] = 1;
  EXPECT_EQ(gguf_error(g),
            "tokenizer.ggml.token_type[267] is 1 (NORMAL), expected 3 (CONTROL) (Kimi-K3's 256 "
            "specials follow the 262 NORMAL tokens)");
  g = to_gguf_tokenizer(handmade(), 520);
  g.token_types[519] = 4;
  EXPECT_EQ(gguf_error(g),
            "tokenizer.ggml.token_type[519] is 4 (USER_DEFINED), expected 5 (UNUSED) (only "
            "padding follows the specials)");
  g = to_gguf_tokenizer(handmade());
  g.token_types.pop_back();
  EXPECT_EQ(gguf_error(g),
            "tokenizer.ggml.tokens has 518 entries but tokenizer.ggml.token_type has 517");
  g = to_gguf_tokenizer(handmade());
  g.tokens.resize(400);
  g.token_types.resize(400);
  EXPECT_EQ(gguf_error(g),
            "tokenizer.ggml.tokens has 400 entries, expected at least 518 (262 NORMAL tokens and "
            "256 specials)");
}

TEST(GgufVocab, RejectsBadTokens) {
  GgufTokenizer g = to_gguf_tokenizer(handmade());
  g.tokens[5] = "a b";
  EXPECT_EQ(gguf_error(g), "tokenizer.ggml.tokens[5] 'a b' is not a string of GPT-2 byte symbols");
  g = to_gguf_tokenizer(handmade());
  g.tokens[256] = "a";
  EXPECT_EQ(gguf_error(g), "tokenizer.ggml.tokens token 256: token [61] duplicates token 97");
  g = to_gguf_tokenizer(handmade());
  g.tokens[264] = "<|im_end|>";
  EXPECT_EQ(gguf_error(g),
            "tokenizer.ggml.tokens[264] is '<|im_end|>', expected '<|end_of_msg|>' (Kimi-K3 "
            "special token base + 2)");
}

TEST(GgufVocab, ChecksMergesAgainstRanks) {
  GgufTokenizer g = to_gguf_tokenizer(handmade());
  std::swap(g.merges[0], g.merges[1]);
  EXPECT_EQ(gguf_error(g),
            "tokenizer.ggml.merges[0] is 'c d', expected 'a b' from the token ranks");
  // The structural check only asks that each merge joins two tokens into a token.
  EXPECT_EQ(gguf_error(g, GgufMergesCheck::kStructural), "(no error)");
  g = to_gguf_tokenizer(handmade());
  g.merges.pop_back();
  EXPECT_EQ(gguf_error(g), "tokenizer.ggml.merges has 4 entries, the token ranks give 5");
  g.merges.push_back("a c");
  EXPECT_EQ(gguf_error(g, GgufMergesCheck::kStructural),
            "tokenizer.ggml.merges[4] 'a c' is not 'left right' with left, right and their join "
            "all tokens");
  g.merges.back() = "a  b";
  EXPECT_NE(gguf_error(g, GgufMergesCheck::kStructural), "(no error)");
}

TEST(GgufVocab, ChecksSpecialIds) {
  GgufTokenizer g = to_gguf_tokenizer(handmade());
  g.eos_token_id = 518;
  EXPECT_EQ(gguf_error(g), "tokenizer.ggml.eos_token_id is 518, outside the 518 tokens");
  g = to_gguf_tokenizer(handmade());
  g.bos_token_id.reset();
  g.eos_token_id.reset();
  g.padding_token_id.reset();
  EXPECT_EQ(gguf_error(g), "(no error)");  // optional in llama.cpp too
}

}  // namespace
}  // namespace k3::model
