#include "model/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "test_support.h"

namespace k3::model {
namespace {

using Ids = std::vector<std::int32_t>;

Ids bytes_of(std::string_view s) {
  Ids ids;
  for (const char c : s) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

Ids concat(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::string kFffd = "\xEF\xBF\xBD";

// Base 256 (bytes only): specials at 256..511, <|end_of_msg|> = 258.
const Tokenizer& bytes_tokenizer() {
  static const Tokenizer t(test::byte_vocabulary());
  return t;
}

TEST(Tokenizer, SpecialIds) {
  const Tokenizer& t = bytes_tokenizer();
  EXPECT_EQ(t.size(), 512);
  EXPECT_EQ(t.bos_id(), 256);
  EXPECT_EQ(t.eos_id(), 257);
  EXPECT_EQ(t.stop_id(), 258);
  EXPECT_EQ(t.unk_id(), 510);
  EXPECT_EQ(t.pad_id(), 511);
  EXPECT_EQ(t.special_id("<|end_of_msg|>"), t.stop_id());
  EXPECT_EQ(t.token_bytes(258), "<|end_of_msg|>");
}

TEST(Tokenizer, DisallowedSpecialIsOrdinaryText) {
  const Tokenizer& t = bytes_tokenizer();
  const std::string text = "<|end_of_msg|>";
  const Ids ids = t.encode(text);  // AllowedSpecial::none() by default
  EXPECT_EQ(ids, bytes_of(text));
  EXPECT_EQ(t.decode(ids), text);
  // Allowing a different special does not make this one special either.
  EXPECT_EQ(t.encode(text, AllowedSpecial::only({"[BOS]"})), bytes_of(text));
}

TEST(Tokenizer, AllowedSpecialIsOneId) {
  const Tokenizer& t = bytes_tokenizer();
  EXPECT_EQ(t.encode("<|end_of_msg|>", AllowedSpecial::all()), (Ids{258}));
  EXPECT_EQ(t.encode("[BOS][EOS]", AllowedSpecial::all()), (Ids{256, 257}));
  EXPECT_EQ(t.encode("hello<|end_of_msg|>world", AllowedSpecial::all()),
            concat(concat(t.encode("hello"), {258}), t.encode("world")));
  EXPECT_EQ(t.encode("[BOS]hi<|end_of_msg|>", AllowedSpecial::only({"[BOS]"})),
            concat(Ids{256}, bytes_of("hi<|end_of_msg|>")));
  EXPECT_EQ(t.encode("x<|reserved_token_300|>y", AllowedSpecial::all()), (Ids{'x', 300, 'y'}));
  // Incomplete names are text.
  EXPECT_EQ(t.encode("<|end_of_msg|", AllowedSpecial::all()), bytes_of("<|end_of_msg|"));
  EXPECT_EQ(t.encode("[[BOS]", AllowedSpecial::all()), (Ids{'[', 256}));
  // Text around a special is split as separate segments: " " ends the first one.
  EXPECT_EQ(t.encode("a <|open|> b", AllowedSpecial::all()), (Ids{'a', ' ', 259, ' ', 'b'}));
  EXPECT_EQ(t.decode(t.encode("a <|open|> b", AllowedSpecial::all())), "a <|open|> b");
}

TEST(Tokenizer, UnknownAllowedSpecialIsAnError) {
  try {
    bytes_tokenizer().encode("x", AllowedSpecial::only({"<|im_end|>"}));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "allowed special token '<|im_end|>' is not a special token of this vocabulary");
  }
}

TEST(Tokenizer, InvalidUtf8EncodesBytewiseAndRoundTrips) {
  const Tokenizer& t = bytes_tokenizer();
  const std::vector<std::string> inputs = {"\xFF\xFE",
                                           "ab\xC3",
                                           "\xED\xA0\x80",
                                           "x\xE4\xB8 y",
                                           "\xC0\xAF",
                                           "\xF4\x90\x80\x80z",
                                           std::string("\0\x80", 2)};
  for (const std::string& s : inputs) {
    const Ids ids = t.encode(s, AllowedSpecial::all());
    EXPECT_EQ(ids, bytes_of(s));
    EXPECT_EQ(t.decode_bytes(ids), s);
  }
  EXPECT_EQ(t.decode(t.encode("ab\xC3")), "ab" + kFffd);
}

TEST(Tokenizer, RandomBytesRoundTrip) {
  const Tokenizer t(test::byte_vocabulary({"ab", " a", "\xE4\xB8", "\xAD\xE4", "<|", "  "}));
  std::mt19937 rng(99);
  const char alphabet[] = {'a', 'b', ' ', '\n', '<', '|', '\xE4', '\xB8', '\xAD', '\xFF', 'E'};
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    const int len = static_cast<int>(rng() % 40);
    for (int k = 0; k < len; ++k) s.push_back(alphabet[rng() % sizeof alphabet]);
    ASSERT_EQ(t.decode_bytes(t.encode(s)), s);
    ASSERT_EQ(t.decode_bytes(t.encode(s, AllowedSpecial::all())), s);
  }
}

TEST(Tokenizer, DecodeRejectsUnknownIds) {
  const Tokenizer& t = bytes_tokenizer();
  for (const std::int32_t bad : {512, -1, 1 << 30}) {
    try {
      t.decode(Ids{'a', bad});
      FAIL() << bad;
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), "token id " + std::to_string(bad) +
                                           " is not in the vocabulary (valid ids are 0..511)");
    }
  }
}

TEST(Tokenizer, KimiWrapperSplitsLongRuns) {
  // 30,000 letters: tokenization_kimi.py hands tiktoken 25,000 then 5,000 characters.
  const std::string a30k(30000, 'a');
  const std::vector<std::string_view> chunks = Tokenizer::kimi_chunks(a30k);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].size(), 25000u);
  EXPECT_EQ(chunks[1].size(), 5000u);
  // Counted in characters, not bytes.
  std::string han;
  for (int i = 0; i < 25001; ++i) han += "中";
  const auto han_chunks = Tokenizer::kimi_chunks(han);
  ASSERT_EQ(han_chunks.size(), 2u);
  EXPECT_EQ(han_chunks[0].size(), 75000u);
  // Whitespace and non-whitespace runs are counted separately; short runs never split.
  std::string mixed = "xy" + std::string(26000, ' ') + "z";
  const auto mixed_chunks = Tokenizer::kimi_chunks(mixed);
  ASSERT_EQ(mixed_chunks.size(), 2u);
  EXPECT_EQ(mixed_chunks[0].size(), 2u + 25000u);
  // 400,000-character chunks: alternating "a " never makes a long run.
  std::string alternating;
  for (int i = 0; i < 200001; ++i) alternating += "a ";
  const auto big = Tokenizer::kimi_chunks(alternating);
  ASSERT_EQ(big.size(), 2u);
  EXPECT_EQ(big[0].size(), 400000u);
  EXPECT_EQ(big[1].size(), 2u);

  const Tokenizer t(test::byte_vocabulary({"aa", "aaaa", "aaaaaaaa"}));
  EXPECT_EQ(t.encode(a30k), concat(t.encode(a30k.substr(0, 25000)), t.encode(a30k.substr(25000))));
  EXPECT_EQ(t.decode(t.encode(a30k)), a30k);
}

TEST(IncrementalDecoder, HoldsBackAnIncompleteCharacter) {
  const Tokenizer& t = bytes_tokenizer();
  IncrementalDecoder d(t);
  EXPECT_EQ(d.push('a'), "a");
  EXPECT_EQ(d.push(0xE4), "");
  EXPECT_EQ(d.pending(), "\xE4");
  EXPECT_EQ(d.push(0xB8), "");
  EXPECT_EQ(d.push(0xAD), "中");
  EXPECT_EQ(d.pending(), "");
  EXPECT_EQ(d.push(0xF0), "");
  EXPECT_EQ(d.push(0x9F), "");
  EXPECT_EQ(d.push(0x98), "");
  EXPECT_EQ(d.push(0x80), "\xF0\x9F\x98\x80");
  EXPECT_EQ(d.finish(), "");
}

TEST(IncrementalDecoder, TokensThatSplitCharacters) {
  // "\xE4\xB8" and "\xAD\xE6\x96" cut 中 (E4 B8 AD) and 文 (E6 96 87) across tokens.
  const Tokenizer t(test::byte_vocabulary({"\xE4\xB8", "\xAD\xE6", "\xAD\xE6\x96"}));
  // The tokenizer itself produces such ids for 中文!.
  const Ids ids = t.encode("中文!");
  ASSERT_EQ(ids, (Ids{256, 258, 0x87, '!'}));
  IncrementalDecoder d(t);
  EXPECT_EQ(d.push(ids[0]), "");
  EXPECT_EQ(d.push(ids[1]), "中");
  EXPECT_EQ(d.pending(), "\xE6\x96");
  EXPECT_EQ(d.push(ids[2]), "文");
  EXPECT_EQ(d.push(ids[3]), "!");
  EXPECT_EQ(d.finish(), "");
}

TEST(IncrementalDecoder, InvalidBytesBecomeReplacementCharacters) {
  const Tokenizer& t = bytes_tokenizer();
  IncrementalDecoder d(t);
  EXPECT_EQ(d.push(0xFF), kFffd);
  EXPECT_EQ(d.push(0xE4), "");
  EXPECT_EQ(d.push('a'), kFffd + "a");
  EXPECT_EQ(d.push(0xE4), "");
  EXPECT_EQ(d.push(0xB8), "");
  EXPECT_EQ(d.finish(), kFffd);
  EXPECT_EQ(d.pending(), "");
  // An unknown id throws and changes nothing.
  EXPECT_EQ(d.push(0xE4), "");
  EXPECT_THROW(d.push(100000), InputError);
  EXPECT_EQ(d.pending(), "\xE4");
  EXPECT_EQ(d.push(0xB8), "");
  EXPECT_EQ(d.push(0xAD), "中");
}

TEST(IncrementalDecoder, ConcatenationEqualsDecode) {
  const Tokenizer t(
      test::byte_vocabulary({"\xE4\xB8", "\xAD\xE6\x96", "\x87!", "\xF0\x9F", "\x98\x80"}));
  std::mt19937 rng(5);
  for (int round = 0; round < 2000; ++round) {
    Ids ids;
    const int len = static_cast<int>(rng() % 12);
    for (int i = 0; i < len; ++i) {
      const std::int32_t pick = static_cast<std::int32_t>(rng() % 12);
      ids.push_back(pick < 5 ? 256 + pick : (pick < 10 ? 0x80 + pick * 13 : 'a'));
    }
    IncrementalDecoder d(t);
    std::string streamed;
    for (const std::int32_t id : ids) streamed += d.push(id);
    streamed += d.finish();
    ASSERT_EQ(streamed, t.decode(ids));
  }
}

}  // namespace
}  // namespace k3::model
