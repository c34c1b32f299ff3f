// End to end on GSM8K: the trained vocabulary, round trips, and the GGUF path's ids.
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "model/tokenizer/bpe_trainer.h"
#include "model/tokenizer/gguf_vocab.h"
#include "model/tokenizer/tokenizer.h"
#include "test_support.h"

namespace k3::model {
namespace {

const Tokenizer& trained_tokenizer() {
  static const Tokenizer t(test::trained_vocabulary());
  return t;
}

TEST(Gsm8kTraining, TrainsTheRequestedSize) {
  const Vocabulary& v = test::trained_vocabulary();
  std::cout << "[ trained  ] " << v.base_size() << " tokens in "
            << test::trained_vocabulary_seconds() << " s\n";
  ASSERT_EQ(v.base_size(), 4096);
  EXPECT_EQ(v.size(), 4352);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(v.token_bytes(b), std::string(1, static_cast<char>(b)));
  EXPECT_EQ(Tokenizer(test::trained_vocabulary()).stop_id(), 4098);
  EXPECT_EQ(v.special_id("[PAD]"), 4351);
  // Written as tiktoken.model and read back, it is the same vocabulary.
  EXPECT_EQ(Vocabulary::parse_tiktoken(v.to_tiktoken()), v);
  // The most frequent pairs come first; GSM8K's are a space before a letter or digit.
  EXPECT_EQ(v.token_bytes(256).size(), 2u);
  // Frequent words are single tokens.
  EXPECT_GE(v.rank_of(" the"), 256);
  EXPECT_GE(v.rank_of("####"), 256);
}

// A regression pin: the synthetic checkpoints' token ids depend on this exact vocabulary. If the
// trainer changes on purpose, update the pin (and expect every synthetic token id to change).
TEST(Gsm8kTraining, VocabularyIsPinned) {
  const Vocabulary& v = test::trained_vocabulary();
  const std::string text = v.to_tiktoken();
  std::uint64_t fnv = 1469598103934665603ull;
  for (const char c : text) {
    fnv ^= static_cast<unsigned char>(c);
    fnv *= 1099511628211ull;
  }
  EXPECT_EQ(fnv, 0x1700cdb1644f2b75ull);
  EXPECT_EQ(v.token_bytes(256), " t");
  EXPECT_EQ(v.token_bytes(257), "he");
  EXPECT_EQ(v.token_bytes(260), " the");
  const Tokenizer t(v);
  std::vector<std::string> pieces;
  for (const std::int32_t id :
       t.encode("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72")) {
    pieces.emplace_back(t.token_bytes(id));
  }
  EXPECT_EQ(pieces, (std::vector<std::string>{"N",   "at",   "alia", " sold", " ",   "48",  "/",
                                              "2",   " =",   " <<",  "48",    "/",   "2",   "=",
                                              "24",  ">>",   "24",   " cl",   "ips", " in", " May",
                                              ".\n", "####", " ",    "72"}));
}

TEST(Gsm8kTraining, IsDeterministic) {
  std::vector<std::string> texts = test::read_gsm8k("train");
  texts.resize(2000);
  const BpeTrainOptions options{.vocab_size = 1000, .min_pair_count = 2};
  const Vocabulary a = train_bpe(texts, options);
  const Vocabulary b = train_bpe(texts, options);
  EXPECT_EQ(a.base_size(), 1000);
  EXPECT_EQ(a.to_tiktoken(), b.to_tiktoken());
  // A prefix of the full training: the first merges do not depend on the target size.
  const Vocabulary c = train_bpe(texts, BpeTrainOptions{.vocab_size = 600, .min_pair_count = 2});
  for (std::int32_t r = 0; r < 600; ++r) ASSERT_EQ(c.token_bytes(r), a.token_bytes(r)) << r;
}

TEST(Gsm8kTraining, StopsWhenPairsRunOut) {
  const std::vector<std::string> texts = {"abab abab", "ab"};
  const Vocabulary v = train_bpe(texts, BpeTrainOptions{.vocab_size = 4096, .min_pair_count = 2});
  EXPECT_LT(v.base_size(), 270);
  EXPECT_EQ(v.token_bytes(256), "ab");
}

void expect_round_trip(const std::string& split) {
  const Tokenizer& t = trained_tokenizer();
  const std::vector<std::string> texts = test::read_gsm8k(split);
  ASSERT_FALSE(texts.empty());
  std::size_t bytes = 0, tokens = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::vector<std::int32_t> ids = t.encode(texts[i]);
    for (const std::int32_t id : ids) ASSERT_LT(id, 4096) << "special id in ordinary text";
    ASSERT_EQ(t.decode(ids), texts[i]) << split << " text " << i;
    bytes += texts[i].size();
    tokens += ids.size();
  }
  std::cout << "[ gsm8k    ] " << split << ": " << texts.size() << " texts, " << bytes << " bytes, "
            << tokens << " tokens (" << static_cast<double>(bytes) / tokens << " bytes/token)\n";
  EXPECT_GT(static_cast<double>(bytes) / static_cast<double>(tokens), 2.5);
}

TEST(Gsm8kRoundTrip, EveryTestQuestionAndAnswer) { expect_round_trip("test"); }
TEST(Gsm8kRoundTrip, EveryTrainQuestionAndAnswer) { expect_round_trip("train"); }

TEST(Gsm8kGguf, SameIdsAsTiktoken) {
  const Tokenizer& t = trained_tokenizer();
  const GgufTokenizer g = to_gguf_tokenizer(test::trained_vocabulary());
  EXPECT_GT(g.merges.size(), 3000u);
  const Tokenizer from_gguf = tokenizer_from_gguf(g);
  EXPECT_EQ(from_gguf.vocabulary(), t.vocabulary());
  const std::vector<std::string> texts = test::read_gsm8k("test");
  for (std::size_t i = 0; i < texts.size(); ++i) {
    ASSERT_EQ(from_gguf.encode(texts[i]), t.encode(texts[i])) << "test text " << i;
  }
}

TEST(Gsm8kStreaming, IncrementalDecodeEqualsDecode) {
  const Tokenizer& t = trained_tokenizer();
  std::vector<std::string> texts = test::read_gsm8k("test");
  texts.resize(200);
  texts.push_back("Ünïcödé: 中文字符 😀 — “quotes” ½");  // multi-byte characters across tokens
  for (const std::string& text : texts) {
    const std::vector<std::int32_t> ids = t.encode(text);
    IncrementalDecoder d(t);
    std::string streamed;
    for (const std::int32_t id : ids) {
      const std::string piece = d.push(id);
      streamed += piece;
      ASSERT_EQ(text.compare(0, streamed.size(), streamed), 0);  // always a valid prefix
    }
    streamed += d.finish();
    ASSERT_EQ(streamed, text);
  }
}

}  // namespace
}  // namespace k3::model
