// Byte-pair merging by lowest rank, exactly as tiktoken's _byte_pair_merge.
//
// Start from single bytes; repeatedly merge the adjacent pair whose concatenated bytes have the
// lowest rank, the leftmost one on ties, until no adjacent pair is a token. tiktoken keeps the
// parts in a vector and rescans it after each merge (O(n*m)); that is kept for pieces up to
// kBpeHeapThreshold bytes, where it is fastest. Longer pieces use a linked list and a min-heap
// ordered by (rank, position), which chooses the same merge at every step, in O(n log n).
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "model/tokenizer/vocabulary.h"

namespace k3::model {

inline constexpr std::int32_t kNoRank = std::numeric_limits<std::int32_t>::max();
inline constexpr std::size_t kBpeHeapThreshold = 128;

// Reusable buffers, so the merge loop does not allocate once warmed up.
struct BpeScratch {
  struct Part {
    std::uint32_t start;  // byte offset of this part in the piece
    std::int32_t token;   // rank of this part's bytes
    std::int32_t pair;    // rank of this part joined with the next one, or kNoRank
  };
  std::vector<Part> parts;
  // Heap variant only.
  struct HeapEntry {
    std::int32_t rank;
    std::uint32_t node;
  };
  std::vector<HeapEntry> heap;
  std::vector<std::uint32_t> next;
  std::vector<std::uint32_t> prev;
};

enum class BpeAlgorithm {
  kAuto,    // linear up to kBpeHeapThreshold bytes, heap above
  kLinear,  // tiktoken's vector rescan
  kHeap,    // linked list + min-heap
};

// Merges `piece` (at least one byte) and leaves the final parts, in order, in scratch.parts.
// Merges of rank >= rank_limit are not made (the GGUF converter's bpe(..., max_rank) uses that
// to find the two parts a token was merged from).
void bpe_merge(const Vocabulary& vocab, std::string_view piece, BpeScratch& scratch,
               std::int32_t rank_limit = kNoRank, BpeAlgorithm algorithm = BpeAlgorithm::kAuto);

// Appends the ids of `piece` (without the whole-piece shortcut; see Tokenizer).
void bpe_encode(const Vocabulary& vocab, std::string_view piece, BpeScratch& scratch,
                std::vector<std::int32_t>& out, BpeAlgorithm algorithm = BpeAlgorithm::kAuto);

}  // namespace k3::model
