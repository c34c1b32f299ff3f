// The vocabulary-parallel LM head and sampling (the DP LM head reduces (value, id) pairs).
#include "model/engine/engine_impl.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "model/engine/sampling.h"

namespace k3::model::engine {

using namespace detail;

void Engine::Impl::lm_head_outputs(const Rows& final_rows, std::span<const StepSequence> batch,
                                   const std::vector<std::size_t>& row_seq,
                                   const std::vector<std::size_t>& row_pos, StepResult& result) {
  const std::size_t n = row_seq.size();

  // Per row: temperature (its bits), seed, position, and whether its sequence wants full logits;
  // gathered with the rows, so every rank of the LM-head group knows them without another
  // collective.
  constexpr std::size_t kKeys = 4;
  std::vector<std::uint64_t> keys(n * kKeys);
  for (std::size_t r = 0; r < n; ++r) {
    const Sampling& s = batch[row_seq[r]].sampling;
    keys[r * kKeys] = std::bit_cast<std::uint32_t>(s.temperature);
    // Sampling has always drawn its noise from the seed's low 52 bits (they once travelled as a
    // double); kept, so a sampled run reproduces its tokens across versions.
    keys[r * kKeys + 1] = s.seed & ((std::uint64_t{1} << 52) - 1);
    keys[r * kKeys + 2] = row_pos[r];
    keys[r * kKeys + 3] = batch[row_seq[r]].output == StepSequence::Output::kAllLogits ? 1 : 0;
  }
  const auto in = lm_head.rows().gather(final_rows, n, hidden);
  const std::vector<std::uint64_t> all_keys = lm_head.rows().gather(keys, n, kKeys).rows;
  const std::size_t lm_begin = lm_head.first_row();
  const std::size_t VL = lm_head.shard().rows();
  const std::size_t V = static_cast<std::size_t>(c.vocab_size);
  Rows logits(in.total * VL);
  lm_head.shard().apply(in.rows, in.total, logits);

  // This shard's sampled ids: those below opt.sampled_vocabulary (a shard past it offers none;
  // its -inf loses the reduction to the shards that hold the tokenizer's ids).
  const std::size_t sampled =
      opt.sampled_vocabulary == 0
          ? VL
          : std::min(VL, opt.sampled_vocabulary - std::min(opt.sampled_vocabulary, lm_begin));
  std::vector<float> best(in.total);
  std::vector<std::int32_t> best_id(in.total);
  for (std::size_t r = 0; r < in.total; ++r) {
    const double temperature =
        std::bit_cast<float>(static_cast<std::uint32_t>(all_keys[r * kKeys]));
    const std::uint64_t seed = all_keys[r * kKeys + 1];
    const std::uint64_t pos = all_keys[r * kKeys + 2];
    const ShardChoice choice =
        best_of_shard(std::span<const float>(logits).subspan(r * VL, sampled), nullptr, lm_begin,
                      temperature, seed, pos);
    if (r >= in.mine && r < in.mine + n) result.nonfinite_logits += choice.nonfinite;
    best[r] = choice.value;
    best_id[r] = choice.token;
  }
  lm_head.reduce_best(best, best_id);

  result.next.assign(batch.size(), -1);
  result.every.assign(batch.size(), {});
  for (std::size_t r = 0; r < n; ++r) {
    const std::size_t i = row_seq[r];
    result.next[i] = best_id[in.mine + r];  // rows run in position order: the last one stays
    if (batch[i].output == StepSequence::Output::kEveryToken)
      result.every[i].push_back(best_id[in.mine + r]);
  }

  // Full logits for the debug surface: every shard's columns, reassembled.
  // Every member of the group holds the same keys (one batch, or the gathered rows).
  bool gather_logits = false;
  for (std::size_t r = 0; r < in.total; ++r)
    gather_logits = gather_logits || all_keys[r * kKeys + 3] != 0;
  if (!gather_logits) return;
  const Rows full = lm_head.gather_vocabulary(std::move(logits), in.total, V);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].output != StepSequence::Output::kAllLogits) continue;
    std::vector<float> rows;
    for (std::size_t r = 0; r < n; ++r) {
      if (row_seq[r] != i) continue;
      rows.insert(rows.end(), full.begin() + static_cast<std::ptrdiff_t>((in.mine + r) * V),
                  full.begin() + static_cast<std::ptrdiff_t>((in.mine + r + 1) * V));
    }
    result.logits.push_back(std::move(rows));
  }
}

}  // namespace k3::model::engine
