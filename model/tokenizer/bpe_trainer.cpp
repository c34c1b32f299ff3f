#include "model/tokenizer/bpe_trainer.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "model/tokenizer/pretokenizer.h"
#include "common/error.h"

namespace k3::model {
namespace {

using PairKey = std::uint64_t;

inline PairKey pair_key(std::int32_t a, std::int32_t b) noexcept {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
         static_cast<std::uint32_t>(b);
}
inline std::int32_t left_of(PairKey k) noexcept { return static_cast<std::int32_t>(k >> 32); }
inline std::int32_t right_of(PairKey k) noexcept {
  return static_cast<std::int32_t>(k & 0xFFFFFFFFu);
}

struct Word {
  std::uint32_t begin;  // into the flat symbol array
  std::uint32_t length;
  std::int64_t count;
};

struct HeapEntry {
  std::int64_t count;
  PairKey key;
};

// std::push_heap keeps the "largest" on top: the highest count, then the smallest key.
inline bool heap_less(const HeapEntry& x, const HeapEntry& y) noexcept {
  return x.count != y.count ? x.count < y.count : x.key > y.key;
}

}  // namespace

Vocabulary train_bpe(std::span<const std::string> texts, const BpeTrainOptions& options) {
  if (options.vocab_size < 256 || options.vocab_size > (1 << 24)) {
    throw UsageError("BPE vocabulary size must be in 256..16777216, got " +
                     std::to_string(options.vocab_size));
  }

  // 1. Unique pieces and their counts. Pieces are views into `texts`.
  std::unordered_map<std::string_view, std::int64_t> piece_counts;
  {
    Pretokenizer pretokenizer;
    Pretokenizer::Cursor cursor(pretokenizer);
    std::string_view piece;
    for (const std::string& text : texts) {
      cursor.reset(text);
      while (cursor.next(piece)) {
        if (piece.size() > 1) ++piece_counts[piece];  // single bytes have no pairs
      }
    }
  }
  // A fixed word order, so nothing below depends on hash-table iteration.
  std::vector<std::pair<std::string_view, std::int64_t>> sorted(piece_counts.begin(),
                                                                piece_counts.end());
  std::sort(sorted.begin(), sorted.end());
  piece_counts.clear();

  std::vector<Word> words;
  std::vector<std::int32_t> symbols;
  words.reserve(sorted.size());
  for (const auto& [piece, count] : sorted) {
    words.push_back({static_cast<std::uint32_t>(symbols.size()),
                     static_cast<std::uint32_t>(piece.size()), count});
    for (const char c : piece) symbols.push_back(static_cast<unsigned char>(c));
  }

  // 2. Pair counts and, per pair, the words it occurs in (duplicates allowed).
  std::unordered_map<PairKey, std::int64_t> pair_counts;
  std::unordered_map<PairKey, std::vector<std::uint32_t>> pair_words;
  for (std::uint32_t w = 0; w < words.size(); ++w) {
    const Word& word = words[w];
    const std::int32_t* s = symbols.data() + word.begin;
    for (std::uint32_t i = 0; i + 1 < word.length; ++i) {
      const PairKey k = pair_key(s[i], s[i + 1]);
      pair_counts[k] += word.count;
      pair_words[k].push_back(w);
    }
  }
  std::vector<HeapEntry> heap;
  heap.reserve(pair_counts.size());
  for (const auto& [k, count] : pair_counts) heap.push_back({count, k});
  std::make_heap(heap.begin(), heap.end(), heap_less);

  std::vector<std::string> tokens;
  std::unordered_map<std::string, std::int32_t> token_ids;
  tokens.reserve(static_cast<std::size_t>(options.vocab_size));
  for (int b = 0; b < 256; ++b) {
    tokens.emplace_back(1, static_cast<char>(b));
    token_ids.emplace(tokens.back(), b);
  }

  // 3. Merge the most frequent pair until the vocabulary is full.
  std::vector<std::uint32_t> visited(words.size(), 0);
  std::vector<PairKey> touched;
  std::uint32_t step = 0;
  while (static_cast<std::int32_t>(tokens.size()) < options.vocab_size) {
    // The top is current when its count still is the pair's count (stale entries are dropped).
    while (!heap.empty()) {
      const HeapEntry& top = heap.front();
      const auto it = pair_counts.find(top.key);
      if (it != pair_counts.end() && it->second == top.count && top.count > 0) break;
      std::pop_heap(heap.begin(), heap.end(), heap_less);
      heap.pop_back();
    }
    if (heap.empty() || heap.front().count < options.min_pair_count) break;
    const PairKey best = heap.front().key;
    std::pop_heap(heap.begin(), heap.end(), heap_less);
    heap.pop_back();

    const std::int32_t a = left_of(best);
    const std::int32_t b = right_of(best);
    std::string merged = tokens[a] + tokens[b];
    // Different merge paths can spell the same bytes; a token is added once (tiktoken needs
    // distinct bytes per rank), and the symbol pair then maps to the existing token.
    std::int32_t c;
    if (const auto it = token_ids.find(merged); it != token_ids.end()) {
      c = it->second;
    } else {
      c = static_cast<std::int32_t>(tokens.size());
      token_ids.emplace(merged, c);
      tokens.push_back(std::move(merged));
    }

    ++step;
    touched.clear();
    std::vector<std::uint32_t> occurrences = std::move(pair_words[best]);
    pair_words.erase(best);
    for (const std::uint32_t w : occurrences) {
      if (visited[w] == step) continue;
      visited[w] = step;
      Word& word = words[w];
      std::int32_t* s = symbols.data() + word.begin;
      bool present = false;
      for (std::uint32_t i = 0; i + 1 < word.length && !present; ++i) {
        present = s[i] == a && s[i + 1] == b;
      }
      if (!present) continue;

      for (std::uint32_t i = 0; i + 1 < word.length; ++i) {
        const PairKey k = pair_key(s[i], s[i + 1]);
        pair_counts[k] -= word.count;
        touched.push_back(k);
      }
      std::uint32_t out = 0;
      for (std::uint32_t i = 0; i < word.length;) {
        if (i + 1 < word.length && s[i] == a && s[i + 1] == b) {
          s[out++] = c;
          i += 2;
        } else {
          s[out++] = s[i++];
        }
      }
      word.length = out;
      for (std::uint32_t i = 0; i + 1 < word.length; ++i) {
        const PairKey k = pair_key(s[i], s[i + 1]);
        pair_counts[k] += word.count;
        touched.push_back(k);
        if (s[i] == c || s[i + 1] == c) pair_words[k].push_back(w);
      }
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (const PairKey k : touched) {
      const auto it = pair_counts.find(k);
      if (it->second > 0) {
        heap.push_back({it->second, k});
        std::push_heap(heap.begin(), heap.end(), heap_less);
      } else {
        pair_counts.erase(it);
      }
    }
  }

  return Vocabulary::from_ranked_tokens(tokens, "trained BPE vocabulary");
}

}  // namespace k3::model
