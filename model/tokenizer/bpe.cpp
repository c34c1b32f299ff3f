#include "model/tokenizer/bpe.h"

#include <algorithm>

namespace k3::model {
namespace {

using Part = BpeScratch::Part;

inline std::int32_t lookup(const Vocabulary& vocab, std::string_view bytes,
                           std::int32_t rank_limit) noexcept {
  const std::int32_t r = vocab.rank_of(bytes);
  return (r < 0 || r >= rank_limit) ? kNoRank : r;
}

// tiktoken's algorithm, with the merged part's token carried along instead of looked up again.
void merge_linear(const Vocabulary& vocab, std::string_view piece, BpeScratch& s,
                  std::int32_t rank_limit) {
  const auto n = static_cast<std::uint32_t>(piece.size());
  auto& parts = s.parts;
  parts.clear();
  std::int32_t min_rank = kNoRank;
  std::size_t min_index = 0;
  for (std::uint32_t i = 0; i + 1 < n; ++i) {
    const std::int32_t r = lookup(vocab, piece.substr(i, 2), rank_limit);
    if (r < min_rank) {
      min_rank = r;
      min_index = i;
    }
    parts.push_back({i, vocab.byte_rank(static_cast<unsigned char>(piece[i])), r});
  }
  parts.push_back({n - 1, vocab.byte_rank(static_cast<unsigned char>(piece[n - 1])), kNoRank});
  parts.push_back({n, -1, kNoRank});  // sentinel: the end of the last part

  // Rank of parts[i] joined with parts[i + 1] once parts[i + 1] and parts[i + 2] are one part,
  // i.e. bytes [parts[i].start, parts[i + 3].start) before the removal.
  const auto joined_rank = [&](std::size_t i) -> std::int32_t {
    if (i + 3 < parts.size()) {
      return lookup(vocab, piece.substr(parts[i].start, parts[i + 3].start - parts[i].start),
                    rank_limit);
    }
    return kNoRank;
  };

  while (min_rank != kNoRank) {
    const std::size_t i = min_index;
    if (i > 0) parts[i - 1].pair = joined_rank(i - 1);
    parts[i].token = min_rank;
    parts[i].pair = joined_rank(i);
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(i) + 1);

    min_rank = kNoRank;
    for (std::size_t k = 0; k + 1 < parts.size(); ++k) {
      if (parts[k].pair < min_rank) {
        min_rank = parts[k].pair;
        min_index = k;
      }
    }
  }
  parts.pop_back();  // drop the sentinel
}

// Same merges in the same order: the heap pops the smallest (rank, position); an entry is
// current iff its node is alive and still has that pair rank (a node's start never changes,
// so the node index orders like the position).
void merge_heap(const Vocabulary& vocab, std::string_view piece, BpeScratch& s,
                std::int32_t rank_limit) {
  const auto n = static_cast<std::uint32_t>(piece.size());
  constexpr std::uint32_t kNone = 0xFFFFFFFFu;
  auto& parts = s.parts;  // indexed by node (= start byte); compacted at the end
  auto& next = s.next;
  auto& prev = s.prev;
  auto& heap = s.heap;
  parts.assign(n, Part{0, 0, kNoRank});
  next.assign(n, kNone);
  prev.assign(n, kNone);
  heap.clear();

  const auto later = [](const BpeScratch::HeapEntry& a, const BpeScratch::HeapEntry& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.node > b.node;
  };
  const auto end_of = [&](std::uint32_t node) { return next[node] == kNone ? n : next[node]; };
  const auto pair_rank = [&](std::uint32_t node) -> std::int32_t {
    const std::uint32_t second = next[node];
    if (second == kNone) return kNoRank;
    return lookup(vocab, piece.substr(node, end_of(second) - node), rank_limit);
  };
  const auto push = [&](std::uint32_t node) {
    if (parts[node].pair == kNoRank) return;
    heap.push_back({parts[node].pair, node});
    std::push_heap(heap.begin(), heap.end(), later);
  };

  for (std::uint32_t i = 0; i < n; ++i) {
    parts[i].start = i;
    parts[i].token = vocab.byte_rank(static_cast<unsigned char>(piece[i]));
    next[i] = i + 1 < n ? i + 1 : kNone;
    prev[i] = i > 0 ? i - 1 : kNone;
  }
  for (std::uint32_t i = 0; i + 1 < n; ++i) {
    parts[i].pair = pair_rank(i);
    push(i);
  }

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const BpeScratch::HeapEntry top = heap.back();
    heap.pop_back();
    Part& p = parts[top.node];
    if (p.token < 0 || p.pair != top.rank) continue;  // stale (dead nodes have token -1)
    const std::uint32_t second = next[top.node];
    p.token = top.rank;
    parts[second].token = -1;  // dead
    next[top.node] = next[second];
    if (next[second] != kNone) prev[next[second]] = top.node;
    p.pair = pair_rank(top.node);
    push(top.node);
    const std::uint32_t before = prev[top.node];
    if (before != kNone) {
      parts[before].pair = pair_rank(before);
      push(before);
    }
  }

  std::size_t out = 0;
  for (std::uint32_t node = 0; node != kNone; node = next[node]) {
    parts[out++] = parts[node];
  }
  parts.resize(out);
}

}  // namespace

void bpe_merge(const Vocabulary& vocab, std::string_view piece, BpeScratch& scratch,
               std::int32_t rank_limit, BpeAlgorithm algorithm) {
  if (piece.size() == 1) {
    scratch.parts.assign(1,
                         Part{0, vocab.byte_rank(static_cast<unsigned char>(piece[0])), kNoRank});
    return;
  }
  const bool heap = algorithm == BpeAlgorithm::kHeap ||
                    (algorithm == BpeAlgorithm::kAuto && piece.size() > kBpeHeapThreshold);
  if (heap) {
    merge_heap(vocab, piece, scratch, rank_limit);
  } else {
    merge_linear(vocab, piece, scratch, rank_limit);
  }
}

void bpe_encode(const Vocabulary& vocab, std::string_view piece, BpeScratch& scratch,
                std::vector<std::int32_t>& out, BpeAlgorithm algorithm) {
  bpe_merge(vocab, piece, scratch, kNoRank, algorithm);
  for (const Part& p : scratch.parts) out.push_back(p.token);
}

}  // namespace k3::model
