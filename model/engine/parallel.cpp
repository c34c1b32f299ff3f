// The parallel pieces every block shares: the vocabulary-parallel embedding and the gather of
// the DP groups' rows over TP under DP attention.
#include "model/engine/engine_impl.h"

#include <span>

#include "dist/collectives.h"
#include "quant/reference.h"

namespace k3::model::engine {

using namespace detail;

void Engine::Impl::embed_tokens(std::span<const std::int32_t> ids, Rows& h) const {
  // Vocabulary-parallel over the attention-TP group: each rank fills the rows it holds.
  h.assign(ids.size() * H, 0.0f);
  const std::size_t rows = embed.rows();
  for (std::size_t t = 0; t < ids.size(); ++t) {
    const auto id = static_cast<std::size_t>(ids[t]);
    if (id >= embed_begin && id < embed_begin + rows) {
      quant::dequantize_row(embed.view(), id - embed_begin, std::span<float>(h).subspan(t * H, H));
    }
  }
  if (layout.attn_tp() > 1) dist::allreduce_sum_ordered(groups.attn_tp(), std::span<float>(h));
}

Engine::Impl::Gathered Engine::Impl::rows_over(dist::GroupKind group, const Rows& x, std::size_t n,
                                               std::size_t width) const {
  Gathered g;
  if (!gathers_over_tp(group)) {
    g.rows = x;
    g.rows.resize(n * width);
    g.total = n;
    return g;
  }
  // Each DP group's rows, contributed by its first attention-TP rank.
  const std::span<const float> mine =
      me.attn_tp_rank == 0 ? std::span<const float>(x).first(n * width) : std::span<const float>();
  auto all = dist::allgatherv(groups.tp(), mine);
  g.mine = static_cast<std::size_t>(all.displs[static_cast<std::size_t>(tp_leader)]) / width;
  g.total = all.data.size() / width;
  g.rows = std::move(all.data);
  return g;
}

const dist::Comm& Engine::Impl::comm_over(dist::GroupKind group) const {
  return gathers_over_tp(group) ? groups.tp() : groups.get(group);
}

}  // namespace k3::model::engine
