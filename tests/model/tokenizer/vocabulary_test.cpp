#include "model/tokenizer/vocabulary.h"

#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "test_support.h"

namespace k3::model {
namespace {

// tiktoken.model lines for the 256 single bytes at ranks 0..255.
std::string byte_lines() {
  std::string text;
  for (int b = 0; b < 256; ++b) {
    text += base64_encode(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  }
  return text;
}

std::string parse_error(const std::string& text) {
  try {
    Vocabulary::parse_tiktoken(text);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Base64, RoundTripsAllLengths) {
  std::string bytes;
  for (int n = 0; n < 40; ++n) {
    bytes.push_back(static_cast<char>(n * 37 + 11));
    const std::string enc = base64_encode(bytes);
    EXPECT_EQ(enc.size() % 4, 0u);
    EXPECT_EQ(base64_decode(enc), bytes);
  }
  EXPECT_EQ(base64_encode("hello"), "aGVsbG8=");
  EXPECT_EQ(base64_encode(" the"), "IHRoZQ==");
}

TEST(Base64, DecodeIsStrict) {
  EXPECT_FALSE(base64_decode(""));
  EXPECT_FALSE(base64_decode("YQ="));       // length not a multiple of 4
  EXPECT_FALSE(base64_decode("YR=="));      // unused bits set (not canonical)
  EXPECT_FALSE(base64_decode("Y==="));      // too much padding
  EXPECT_FALSE(base64_decode("YQ==YQ=="));  // padding in the middle
  EXPECT_FALSE(base64_decode("Y!Q="));
  EXPECT_FALSE(base64_decode("YQ-_"));  // URL-safe alphabet is not tiktoken's
  EXPECT_EQ(base64_decode("YQ=="), "a");
  EXPECT_EQ(base64_decode("YWI="), "ab");
  EXPECT_EQ(base64_decode("YWJj"), "abc");
}

TEST(Vocabulary, ParsesTiktokenText) {
  const std::string text = byte_lines() + "YWI= 256\r\n\nIHRoZQ== 257\n";
  const Vocabulary v = Vocabulary::parse_tiktoken(text);
  EXPECT_EQ(v.base_size(), 258);
  EXPECT_EQ(v.size(), 258 + 256);
  EXPECT_EQ(v.token_bytes(256), "ab");
  EXPECT_EQ(v.rank_of(" the"), 257);
  EXPECT_EQ(v.rank_of("abc"), -1);
  EXPECT_EQ(v.byte_rank('a'), 'a');
  EXPECT_EQ(v.to_tiktoken(), byte_lines() + "YWI= 256\nIHRoZQ== 257\n");
  EXPECT_EQ(Vocabulary::parse_tiktoken(v.to_tiktoken()), v);
}

TEST(Vocabulary, ErrorsNameTheLine) {
  const std::string base = byte_lines();
  EXPECT_EQ(parse_error(base + "YWI=\n"),
            "tiktoken.model line 257: expected '<base64> <rank>', got 'YWI='");
  EXPECT_EQ(parse_error(base + "YWI= 256 7\n"),
            "tiktoken.model line 257: expected '<base64> <rank>', got 'YWI= 256 7'");
  EXPECT_EQ(parse_error(base + "   \n"),
            "tiktoken.model line 257: expected '<base64> <rank>', got '   '");
  EXPECT_EQ(parse_error(base + "YW=I 256\n"),
            "tiktoken.model line 257: 'YW=I' is not valid base64");
  EXPECT_EQ(parse_error(base + "YWI= 25x\n"),
            "tiktoken.model line 257: rank '25x' is not a non-negative integer");
  EXPECT_EQ(parse_error(base + "YWI= -1\n"),
            "tiktoken.model line 257: rank '-1' is not a non-negative integer");
  EXPECT_EQ(parse_error(base + "YWI= 99999999999999999999\n"),
            "tiktoken.model line 257: rank '99999999999999999999' is not a non-negative integer");
  EXPECT_EQ(parse_error(base + "YWI= 300\n"),
            "tiktoken.model line 257: rank 300 out of order, expected 256 (ranks must count 0, "
            "1, 2, ... in file order)");
  EXPECT_EQ(parse_error(base + "YWI= 256\nYWI= 257\n"),
            "tiktoken.model line 258: token [61 62] duplicates line 257");
  EXPECT_EQ(parse_error(base + "YQ== 256\n"),
            "tiktoken.model line 257: token [61] duplicates line 98");
  EXPECT_EQ(parse_error(""), "tiktoken.model: contains no tokens");
  // Drop byte 0xFF (the last line).
  std::string missing = base.substr(0, base.rfind('\n', base.size() - 2) + 1);
  EXPECT_EQ(parse_error(missing),
            "tiktoken.model: no token for byte 0xFF (a byte-level BPE vocabulary needs all 256 "
            "single bytes)");
}

TEST(Vocabulary, LoadNamesTheFile) {
  try {
    Vocabulary::load_tiktoken("/nonexistent/tiktoken.model");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/tiktoken.model: cannot open");
  }
}

TEST(Vocabulary, FromRankedTokensChecksDuplicates) {
  try {
    test::byte_vocabulary({"ab", "cd", "ab"});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "test vocabulary token 258: token [61 62] duplicates token 256");
  }
}

TEST(Vocabulary, KimiK3SpecialNamesByOffset) {
  const std::vector<std::string> real = kimi_k3_special_names(163584);
  ASSERT_EQ(real.size(), 256u);
  EXPECT_EQ(real[0], "[BOS]");
  EXPECT_EQ(real[1], "[EOS]");
  EXPECT_EQ(real[2], "<|end_of_msg|>");
  EXPECT_EQ(real[3], "<|open|>");
  EXPECT_EQ(real[4], "<|close|>");
  EXPECT_EQ(real[5], "<|sep|>");
  EXPECT_EQ(real[6], "[start_header_id]");
  EXPECT_EQ(real[7], "[end_header_id]");
  EXPECT_EQ(real[8], "<|reserved_token_163592|>");
  EXPECT_EQ(real[9], "[EOT]");
  EXPECT_EQ(real[18], "<|media_begin|>");
  EXPECT_EQ(real[21], "<|media_pad|>");
  EXPECT_EQ(real[65], "<osagent_mode>");
  EXPECT_EQ(real[253], "<|reserved_token_163837|>");
  EXPECT_EQ(real[254], "[UNK]");
  EXPECT_EQ(real[255], "[PAD]");

  const Vocabulary v = test::byte_vocabulary();  // base 256: specials 256..511
  EXPECT_EQ(v.special_id("[BOS]"), 256);
  EXPECT_EQ(v.special_id("<|end_of_msg|>"), 258);
  EXPECT_EQ(v.special_id("<|reserved_token_264|>"), 264);
  EXPECT_EQ(v.special_id("[PAD]"), 511);
  EXPECT_FALSE(v.special_id("<|reserved_token_163592|>"));
  EXPECT_EQ(v.id_bytes(258), "<|end_of_msg|>");
  EXPECT_TRUE(v.is_special(511));
  EXPECT_FALSE(v.is_special(512));
  EXPECT_EQ(v.id_bytes(512), "");
}

}  // namespace
}  // namespace k3::model
