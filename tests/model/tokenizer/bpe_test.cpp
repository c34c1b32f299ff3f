#include "model/tokenizer/bpe.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "test_support.h"

namespace k3::model {
namespace {

using Ids = std::vector<std::int32_t>;

Ids bpe(const Vocabulary& v, std::string_view piece, BpeAlgorithm algo = BpeAlgorithm::kAuto) {
  BpeScratch scratch;
  Ids out;
  bpe_encode(v, piece, scratch, out, algo);
  return out;
}

// An independent oracle: the textbook loop (as in llama.cpp's converter's QwenModel.bpe):
// recompute every adjacent pair's rank, merge the leftmost lowest, repeat.
Ids naive_bpe(const Vocabulary& v, std::string_view piece, std::int32_t limit = kNoRank) {
  std::vector<std::string> parts;
  for (const char c : piece) parts.emplace_back(1, c);
  for (;;) {
    std::int32_t best = kNoRank;
    std::size_t at = 0;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      const std::int32_t r = v.rank_of(parts[i] + parts[i + 1]);
      if (r >= 0 && r < best) {
        best = r;
        at = i;
      }
    }
    if (best == kNoRank || best >= limit) break;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  Ids ids;
  for (const auto& p : parts) ids.push_back(v.rank_of(p));
  return ids;
}

TEST(Bpe, LowestRankMergesFirst) {
  // "bc" ranks below "ab": a + bc.
  const Vocabulary v1 = test::byte_vocabulary({"bc", "ab"});
  EXPECT_EQ(bpe(v1, "abc"), (Ids{'a', 256}));
  // "ab" ranks below "bc": ab + c.
  const Vocabulary v2 = test::byte_vocabulary({"ab", "bc"});
  EXPECT_EQ(bpe(v2, "abc"), (Ids{256, 'c'}));
  // Through the tokenizer (the piece "abc" is not a token, so it is merged).
  EXPECT_EQ(Tokenizer(test::byte_vocabulary({"bc", "ab"})).encode("abc"), (Ids{'a', 256}));
  EXPECT_EQ(Tokenizer(test::byte_vocabulary({"ab", "bc"})).encode("abc"), (Ids{256, 'c'}));
}

TEST(Bpe, MergesChainThroughLaterRanks) {
  // ab(256) + cd(257), then ab+cd = abcd(259); bc(258) never gets a chance.
  const Vocabulary v = test::byte_vocabulary({"ab", "cd", "bc", "abcd"});
  EXPECT_EQ(bpe(v, "abcd"), (Ids{259}));
  // bc first: a + bc + d, and neither "abc" nor "bcd" is a token.
  const Vocabulary w = test::byte_vocabulary({"bc", "ab", "cd", "abcd"});
  EXPECT_EQ(bpe(w, "abcd"), (Ids{'a', 256, 'd'}));
}

TEST(Bpe, WholePieceShortcutWinsOverMerging) {
  // tiktoken looks the whole piece up first; merging alone would stop at a + bc + d.
  const Tokenizer t(test::byte_vocabulary({"bc", "ab", "cd", "abcd"}));
  EXPECT_EQ(t.encode("abcd"), (Ids{259}));
  EXPECT_EQ(t.encode(" abcd"), (Ids{' ', 'a', 256, 'd'}));  // " abcd" is not a token
}

TEST(Bpe, EqualRanksMergeLeftmostFirst) {
  const Vocabulary v = test::byte_vocabulary({"aa"});
  EXPECT_EQ(bpe(v, "aaa"), (Ids{256, 'a'}));
  EXPECT_EQ(bpe(v, "aaaa"), (Ids{256, 256}));
  EXPECT_EQ(bpe(v, "aaaaa"), (Ids{256, 256, 'a'}));
  const Vocabulary w = test::byte_vocabulary({"aa", "aaa"});
  EXPECT_EQ(bpe(w, "aaaaa"), (Ids{256, 257}));  // aa|aa|a, then aa+a (aaa) at the right
}

TEST(Bpe, RankLimitStopsBeforeTheToken) {
  const Vocabulary v = test::byte_vocabulary({"ab", "cd", "bc", "abcd"});
  BpeScratch s;
  bpe_merge(v, "abcd", s, 259);  // the converter's bpe(ranks, token, max_rank=rank)
  ASSERT_EQ(s.parts.size(), 2u);
  EXPECT_EQ(s.parts[0].token, 256);
  EXPECT_EQ(s.parts[1].start, 2u);
  EXPECT_EQ(s.parts[1].token, 257);
}

// Random vocabularies over a 4-letter alphabet (many overlapping merges), random pieces:
// tiktoken's vector algorithm, the heap algorithm and the naive oracle agree.
TEST(Bpe, LinearHeapAndOracleAgree) {
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    std::vector<std::string> extra;
    std::set<std::string> seen;
    while (extra.size() < 120) {
      std::string t;
      const int len = 2 + static_cast<int>(rng() % 5);
      for (int i = 0; i < len; ++i) t.push_back("abcd"[rng() % 4]);
      if (seen.insert(t).second) extra.push_back(t);
    }
    const Vocabulary v = test::byte_vocabulary(extra);
    for (int k = 0; k < 100; ++k) {
      std::string piece;
      const int len = 1 + static_cast<int>(rng() % 300);
      for (int i = 0; i < len; ++i) piece.push_back("abcd"[rng() % 4]);
      const Ids want = naive_bpe(v, piece);
      ASSERT_EQ(bpe(v, piece, BpeAlgorithm::kLinear), want) << piece;
      ASSERT_EQ(bpe(v, piece, BpeAlgorithm::kHeap), want) << piece;
      const std::int32_t limit = 256 + static_cast<std::int32_t>(rng() % 120);
      BpeScratch s;
      bpe_merge(v, piece, s, limit, BpeAlgorithm::kHeap);
      Ids limited;
      for (const auto& p : s.parts) limited.push_back(p.token);
      ASSERT_EQ(limited, naive_bpe(v, piece, limit)) << piece << " limit " << limit;
    }
  }
}

}  // namespace
}  // namespace k3::model
