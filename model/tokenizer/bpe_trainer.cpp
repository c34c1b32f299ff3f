#include "model/tokenizer/bpe_trainer.h"

#include <algorithm>
#include <optional>
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

// One training run: the corpus as words of symbols, the pair counts with a max-heap over them
// (stale entries are dropped when they reach the top), and the tokens made so far.
class BpeTraining {
 public:
  explicit BpeTraining(std::span<const std::string> texts) {
    count_words(texts);
    count_pairs();
    for (int b = 0; b < 256; ++b) {
      tokens_.emplace_back(1, static_cast<char>(b));
      token_ids_.emplace(tokens_.back(), b);
    }
  }

  // Merge the most frequent pair until the vocabulary is full.
  Vocabulary train(const BpeTrainOptions& options) {
    tokens_.reserve(static_cast<std::size_t>(options.vocab_size));
    visited_.assign(words_.size(), 0);
    while (static_cast<std::int32_t>(tokens_.size()) < options.vocab_size) {
      const std::optional<PairKey> best = pop_best(options.min_pair_count);
      if (!best) break;
      merge(*best, add_token(left_of(*best), right_of(*best)));
    }
    return Vocabulary::from_ranked_tokens(tokens_, "trained BPE vocabulary");
  }

 private:
  // Unique pieces and their counts, in a fixed word order (nothing below depends on hash-table
  // iteration). Pieces are views into `texts`; single bytes have no pairs.
  void count_words(std::span<const std::string> texts) {
    std::unordered_map<std::string_view, std::int64_t> piece_counts;
    Pretokenizer pretokenizer;
    Pretokenizer::Cursor cursor(pretokenizer);
    std::string_view piece;
    for (const std::string& text : texts) {
      cursor.reset(text);
      while (cursor.next(piece)) {
        if (piece.size() > 1) ++piece_counts[piece];
      }
    }
    std::vector<std::pair<std::string_view, std::int64_t>> sorted(piece_counts.begin(),
                                                                  piece_counts.end());
    std::sort(sorted.begin(), sorted.end());
    words_.reserve(sorted.size());
    for (const auto& [text, count] : sorted) {
      words_.push_back({static_cast<std::uint32_t>(symbols_.size()),
                        static_cast<std::uint32_t>(text.size()), count});
      for (const char c : text) symbols_.push_back(static_cast<unsigned char>(c));
    }
  }

  // Pair counts and, per pair, the words it occurs in (duplicates allowed).
  void count_pairs() {
    for (std::uint32_t w = 0; w < words_.size(); ++w) {
      const Word& word = words_[w];
      const std::int32_t* s = symbols_.data() + word.begin;
      for (std::uint32_t i = 0; i + 1 < word.length; ++i) {
        const PairKey k = pair_key(s[i], s[i + 1]);
        pair_counts_[k] += word.count;
        pair_words_[k].push_back(w);
      }
    }
    heap_.reserve(pair_counts_.size());
    for (const auto& [k, count] : pair_counts_) heap_.push_back({count, k});
    std::make_heap(heap_.begin(), heap_.end(), heap_less);
  }

  // The most frequent pair, taken off the heap; none when no pair occurs `min_count` times.
  std::optional<PairKey> pop_best(std::int64_t min_count) {
    // The top is current when its count still is the pair's count.
    while (!heap_.empty()) {
      const HeapEntry& top = heap_.front();
      const auto it = pair_counts_.find(top.key);
      if (it != pair_counts_.end() && it->second == top.count && top.count > 0) break;
      std::pop_heap(heap_.begin(), heap_.end(), heap_less);
      heap_.pop_back();
    }
    if (heap_.empty() || heap_.front().count < min_count) return std::nullopt;
    const PairKey best = heap_.front().key;
    std::pop_heap(heap_.begin(), heap_.end(), heap_less);
    heap_.pop_back();
    return best;
  }

  // The token spelling a then b. Different merge paths can spell the same bytes; a token is
  // added once (tiktoken needs distinct bytes per rank), and the symbol pair then maps to the
  // existing token.
  std::int32_t add_token(std::int32_t a, std::int32_t b) {
    std::string merged = tokens_[a] + tokens_[b];
    if (const auto it = token_ids_.find(merged); it != token_ids_.end()) return it->second;
    const auto c = static_cast<std::int32_t>(tokens_.size());
    token_ids_.emplace(merged, c);
    tokens_.push_back(std::move(merged));
    return c;
  }

  // Every occurrence of `pair` becomes symbol c; the counts of the pairs around it change.
  void merge(PairKey pair, std::int32_t c) {
    const std::int32_t a = left_of(pair), b = right_of(pair);
    ++step_;
    touched_.clear();
    std::vector<std::uint32_t> occurrences = std::move(pair_words_[pair]);
    pair_words_.erase(pair);
    for (const std::uint32_t w : occurrences) {
      if (visited_[w] == step_) continue;
      visited_[w] = step_;
      merge_in_word(w, a, b, c);
    }
    std::sort(touched_.begin(), touched_.end());
    touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
    for (const PairKey k : touched_) {
      const auto it = pair_counts_.find(k);
      if (it->second > 0) {
        heap_.push_back({it->second, k});
        std::push_heap(heap_.begin(), heap_.end(), heap_less);
      } else {
        pair_counts_.erase(it);
      }
    }
  }

  void merge_in_word(std::uint32_t w, std::int32_t a, std::int32_t b, std::int32_t c) {
    Word& word = words_[w];
    std::int32_t* s = symbols_.data() + word.begin;
    bool present = false;
    for (std::uint32_t i = 0; i + 1 < word.length && !present; ++i) {
      present = s[i] == a && s[i + 1] == b;
    }
    if (!present) return;
    for (std::uint32_t i = 0; i + 1 < word.length; ++i) {
      const PairKey k = pair_key(s[i], s[i + 1]);
      pair_counts_[k] -= word.count;
      touched_.push_back(k);
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
      pair_counts_[k] += word.count;
      touched_.push_back(k);
      if (s[i] == c || s[i + 1] == c) pair_words_[k].push_back(w);
    }
  }

  std::vector<Word> words_;
  std::vector<std::int32_t> symbols_;
  std::unordered_map<PairKey, std::int64_t> pair_counts_;
  std::unordered_map<PairKey, std::vector<std::uint32_t>> pair_words_;
  std::vector<HeapEntry> heap_;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, std::int32_t> token_ids_;
  std::vector<std::uint32_t> visited_;  // the merge step that last visited each word
  std::vector<PairKey> touched_;
  std::uint32_t step_ = 0;
};

}  // namespace

Vocabulary train_bpe(std::span<const std::string> texts, const BpeTrainOptions& options) {
  if (options.vocab_size < 256 || options.vocab_size > (1 << 24)) {
    throw UsageError("BPE vocabulary size must be in 256..16777216, got " +
                     std::to_string(options.vocab_size));
  }
  return BpeTraining(texts).train(options);
}

}  // namespace k3::model
