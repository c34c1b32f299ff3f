// The parallel-layer tier (parallel.h): every collective of a forward step is issued here.
#include "model/engine/parallel.h"

#include <algorithm>
#include <cstring>
#include <string>

#include <oneapi/tbb/parallel_for.h>

#include "common/error.h"
#include "dist/collectives.h"
#include "quant/reference.h"

namespace k3::model::engine {

// --- RowGroup ---

RowGroup::RowGroup(const dist::Groups& groups, dist::GroupKind group) : groups_(&groups) {
  const dist::Layout& layout = groups.layout();
  const dist::RankCoords me = layout.coords(groups.world().rank());
  gathers_ = group == dist::GroupKind::kTp && layout.tp() != layout.attn_tp();
  comm_ = &groups.get(group);
  contributes_ = me.attn_tp_rank == 0;
  // The TP group's ranks are numbered by tp_rank; a DP group's first rank sits attn_tp_rank
  // places before this one.
  leader_ = me.tp_rank - me.attn_tp_rank;
  if (groups.tp().rank() != layout.position(dist::GroupKind::kTp, me.rank).index) {
    throw InternalError("engine: the TP communicator's rank order differs from the layout's");
  }
}

template <class T>
RowGroup::Gathered<T> RowGroup::gather_rows(std::span<const T> x, std::size_t n,
                                            std::size_t width) const {
  Gathered<T> g;
  if (!gathers_) {
    g.rows.assign(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n * width));
    g.total = n;
    return g;
  }
  const std::span<const T> mine = contributes_ ? x.first(n * width) : std::span<const T>();
  auto all = dist::allgatherv(groups_->tp(), mine);
  g.mine = width == 0
               ? 0
               : static_cast<std::size_t>(all.displs[static_cast<std::size_t>(leader_)]) / width;
  g.total = width == 0 ? 0 : all.data.size() / width;
  g.rows = std::move(all.data);
  return g;
}

RowGroup::Gathered<float> RowGroup::gather(std::span<const float> x, std::size_t n,
                                           std::size_t width) const {
  return gather_rows(x, n, width);
}

RowGroup::Gathered<std::uint64_t> RowGroup::gather(std::span<const std::uint64_t> x, std::size_t n,
                                                   std::size_t width) const {
  return gather_rows(x, n, width);
}

// --- RowParallelLinear ---

void RowParallelLinear::apply(std::span<const float> x, std::size_t n, std::span<float> y) const {
  local_.apply(x, n, y);
  if (comm_->size() > 1) dist::allreduce_sum_ordered(*comm_, y.first(n * local_.rows()));
}

// --- ParallelMlp ---

ParallelMlp::ParallelMlp(Linear gate, Linear up, Linear down, RowGroup rows, float situ_beta,
                         float situ_linear_beta)
    : gate_(std::move(gate)),
      up_(std::move(up)),
      down_(std::move(down), rows.comm()),
      rows_(rows),
      situ_beta_(situ_beta),
      situ_linear_beta_(situ_linear_beta) {}

ParallelMlp ParallelMlp::swiglu(Linear gate, Linear up, Linear down, RowGroup rows) {
  ParallelMlp mlp(std::move(gate), std::move(up), std::move(down), rows, 0, 0);
  mlp.swiglu_ = true;
  return mlp;
}

void ParallelMlp::apply(std::span<const float> x, std::size_t n, Rows& out) const {
  const std::size_t hidden = gate_.cols();
  // Without a gather over DP groups (RowGroup) the rows are read where they are.
  const auto in =
      rows_.gathers() ? rows_.gather(x, n, hidden) : RowGroup::Gathered<float>{{}, n, 0};
  const std::span<const float> rows = rows_.gathers() ? std::span<const float>(in.rows) : x;
  const std::size_t inner = gate_.rows();
  Rows g(in.total * inner), u(in.total * inner), y(in.total * hidden, 0.0f);
  SharedInput shared(rows, in.total);
  shared.apply(gate_, g);
  shared.apply(up_, u);
  if (swiglu_) {
    silu_rows(g);
    for (std::size_t i = 0; i < g.size(); ++i) g[i] *= u[i];
  } else {
    situ_rows(g, u, situ_beta_, situ_linear_beta_);
  }
  down_.apply(g, in.total, y);
  if (in.mine == 0 && in.total == n) {
    out = std::move(y);
    return;
  }
  out.assign(y.begin() + static_cast<std::ptrdiff_t>(in.mine * hidden),
             y.begin() + static_cast<std::ptrdiff_t>((in.mine + n) * hidden));
}

// --- VocabParallelEmbedding ---

void VocabParallelEmbedding::lookup(std::span<const std::int32_t> ids, std::size_t width,
                                    Rows& out) const {
  out.assign(ids.size() * width, 0.0f);
  const std::size_t rows = table_.rows();
  for (std::size_t t = 0; t < ids.size(); ++t) {
    const auto id = static_cast<std::size_t>(ids[t]);
    if (id >= first_row_ && id < first_row_ + rows) {
      quant::dequantize_row(table_.view(), id - first_row_,
                            std::span<float>(out).subspan(t * width, width));
    }
  }
  if (comm_->size() > 1) dist::allreduce_sum_ordered(*comm_, std::span<float>(out));
}

// --- VocabParallelLmHead ---

void VocabParallelLmHead::reduce_best(std::span<float> best, std::span<std::int32_t> token) const {
  if (rows_.comm().size() > 1) dist::allreduce_maxloc(rows_.comm(), best, token);
}

Rows VocabParallelLmHead::gather_vocabulary(Rows logits, std::size_t n, std::size_t vocab) const {
  const dist::Comm& comm = rows_.comm();
  if (comm.size() == 1) return logits;
  const auto shards = dist::allgatherv(comm, std::span<const float>(logits));
  Rows full(n * vocab, 0.0f);
  for (std::size_t m = 0; m < static_cast<std::size_t>(comm.size()); ++m) {
    const std::size_t cols =
        static_cast<std::size_t>(shards.counts[m]) / std::max<std::size_t>(n, 1);
    const std::size_t begin = cols * m;  // equal vocabulary shards in rank order
    for (std::size_t r = 0; r < n; ++r)
      std::copy_n(&shards.data[static_cast<std::size_t>(shards.displs[m]) + r * cols], cols,
                  &full[r * vocab + begin]);
  }
  return full;
}

// --- TokenShares ---

TokenShares::TokenShares(const dist::Comm& attn_tp, std::size_t n) : comm_(&attn_tp), n_(n) {
  const auto size = static_cast<std::size_t>(attn_tp.size());
  for (std::size_t t = static_cast<std::size_t>(attn_tp.rank()); t < n; t += size)
    mine_.push_back(t);
}

Rows TokenShares::assemble(Rows rows, std::size_t width) const {
  const auto size = static_cast<std::size_t>(comm_->size());
  if (size == 1) return rows;
  std::vector<int> counts(size);  // rank r holds tokens r, r + size, ...
  for (std::size_t r = 0; r < size; ++r)
    counts[r] = static_cast<int>((n_ > r ? (n_ - r + size - 1) / size : 0) * width);
  const auto all = dist::allgatherv(*comm_, std::span<const float>(rows), std::move(counts));
  Rows out(n_ * width);
  for (std::size_t r = 0; r < size; ++r) {
    const float* src = all.data.data() + all.displs[r];
    for (std::size_t t = r, i = 0; t < n_; t += size, ++i)
      std::copy_n(src + i * width, width, &out[t * width]);
  }
  return out;
}

// --- ExpertDispatcher ---

ExpertDispatcher::ExpertDispatcher(const dist::Groups& groups, int num_experts, int top_k,
                                   std::size_t latent, int first_local_expert,
                                   std::size_t local_experts)
    : groups_(&groups),
      top_k_(static_cast<std::size_t>(top_k)),
      latent_(latent),
      first_local_(first_local_expert),
      local_(local_experts) {
  const dist::Layout& layout = groups.layout();
  const int me = groups.world().rank();
  for (int e = 0; e < num_experts; ++e) owner_of_.push_back(layout.expert_owner(e, num_experts));
  if (groups.moe_ep().rank() != layout.position(dist::GroupKind::kMoeEp, me).index ||
      groups.moe_tp().rank() != layout.position(dist::GroupKind::kMoeTp, me).index) {
    throw InternalError("engine: the MoE communicators' rank order differs from the layout's");
  }
}

// A routed token on the wire: its top_k expert ids (int32, -1 where another owner serves the
// route), their weights (float), then its latent row.
struct ExpertDispatcher::Records {
  std::size_t k = 0, width = 0;
  std::size_t ids_bytes = 0, weights_bytes = 0, latent_at = 0, size = 0;
  std::vector<std::int32_t> ids;
  std::vector<float> weights;

  Records(std::size_t top_k, std::size_t latent)
      : k(top_k),
        width(latent),
        ids_bytes(top_k * sizeof(std::int32_t)),
        weights_bytes(top_k * sizeof(float)),
        latent_at(ids_bytes + weights_bytes),
        size(latent_at + latent * sizeof(float)),
        ids(top_k),
        weights(top_k) {}

  void put(char* at, const std::int32_t* id, const float* weight, const void* latent) const {
    std::memcpy(at, id, ids_bytes);
    std::memcpy(at + ids_bytes, weight, weights_bytes);
    std::memcpy(at + latent_at, latent, width * sizeof(float));
  }
  // The record at `at` into ids / weights; its latent.
  const void* read(const char* at) {
    std::memcpy(ids.data(), at, ids_bytes);
    std::memcpy(weights.data(), at + ids_bytes, weights_bytes);
    return at + latent_at;
  }
  // Token i of `routes` into ids / weights.
  void read_routes(std::span<const Route> routes, std::size_t i) {
    for (std::size_t r = 0; r < k; ++r) {
      ids[r] = routes[i * k + r].expert;
      weights[r] = routes[i * k + r].weight;
    }
  }
};

// 1. With MoE-TP, the moe-tp group's tokens, so that every slice of an expert sees the same
//    rows: each member's tokens as one record each (all routes), allgathered; `member_tokens`
//    gets each member's count in rank order.
std::vector<char> ExpertDispatcher::share_tokens(std::span<const Route> routes,
                                                 std::span<const float> z, std::size_t n,
                                                 Records& records,
                                                 std::vector<int>& member_tokens) const {
  std::vector<char> mine(n * records.size);
  for (std::size_t i = 0; i < n; ++i) {
    records.read_routes(routes, i);
    records.put(&mine[i * records.size], records.ids.data(), records.weights.data(),
                &z[i * records.width]);
  }
  auto all = dist::allgatherv(groups_->moe_tp(), std::span<const char>(mine));
  member_tokens.clear();
  for (int bytes : all.counts) member_tokens.push_back(bytes / static_cast<int>(records.size));
  return std::move(all.data);
}

// 2. Dispatch over moe-ep: per token one record for each owner of its routes (in owner order),
//    the ids of routes another owner serves set to -1. `token(i)` reads token i into the
//    records' ids / weights and returns its latent; `sent_token[o]` gets the tokens sent to o.
dist::Gathered<char> ExpertDispatcher::dispatch(
    std::size_t group_tokens, Records& records,
    const std::function<const void*(std::size_t)>& token,
    std::vector<std::vector<std::size_t>>& sent_token) const {
  const std::size_t k = records.k;
  const std::size_t owners = static_cast<std::size_t>(groups_->moe_ep().size());
  std::vector<std::vector<char>> per_owner(owners);
  sent_token.assign(owners, {});
  std::vector<std::size_t> token_owners;
  std::vector<std::int32_t> masked(k);
  std::vector<float> masked_weights(k);
  auto owner = [&](std::int32_t expert) {
    return static_cast<std::size_t>(owner_of_.at(static_cast<std::size_t>(expert)));
  };
  for (std::size_t i = 0; i < group_tokens; ++i) {
    const void* latent = token(i);
    token_owners.clear();
    for (std::size_t r = 0; r < k; ++r) token_owners.push_back(owner(records.ids[r]));
    std::sort(token_owners.begin(), token_owners.end());
    token_owners.erase(std::unique(token_owners.begin(), token_owners.end()), token_owners.end());
    for (std::size_t o : token_owners) {
      for (std::size_t r = 0; r < k; ++r) {
        const bool here = owner(records.ids[r]) == o;
        masked[r] = here ? records.ids[r] : -1;
        masked_weights[r] = here ? records.weights[r] : 0.0f;
      }
      auto& buf = per_owner[o];
      const std::size_t at = buf.size();
      buf.resize(at + records.size);
      records.put(&buf[at], masked.data(), masked_weights.data(), latent);
      sent_token[o].push_back(i);
    }
  }
  std::vector<char> send;
  std::vector<int> counts(owners);
  for (std::size_t d = 0; d < owners; ++d) {
    counts[d] = dist::checked_count(per_owner[d].size(), "MoE dispatch");
    send.insert(send.end(), per_owner[d].begin(), per_owner[d].end());
  }
  // With one owner (EP 1) the records stay here.
  return owners == 1
             ? dist::Gathered<char>{std::move(send), counts, {0}}
             : dist::alltoallv(groups_->moe_ep(), std::span<const char>(send), counts);
}

// 3. The owner side: the received (record, weight) pairs grouped by local expert, each expert
//    run once over its rows (in parallel), the weighted outputs summed per record in expert
//    order (the same sum whatever ran first). One latent row per received record.
Rows ExpertDispatcher::run_local(const std::vector<char>& received, Records& records,
                                 const LocalExpert& expert) const {
  const std::size_t width = records.width, rec = records.size;
  const std::size_t nrec = received.size() / rec;
  std::vector<std::vector<std::pair<std::size_t, float>>> by_expert(local_);
  for (std::size_t r = 0; r < nrec; ++r) {
    records.read(&received[r * rec]);
    for (std::size_t j = 0; j < records.k; ++j) {
      const std::int32_t id = records.ids[j];
      if (id < 0) continue;
      const std::int64_t e = std::int64_t{id} - first_local_;
      if (e < 0 || static_cast<std::size_t>(e) >= local_)
        throw InternalError("MoE dispatch: expert " + std::to_string(id) + " is not local");
      by_expert[static_cast<std::size_t>(e)].emplace_back(r, records.weights[j]);
    }
  }
  std::vector<Rows> expert_out(local_);
  oneapi::tbb::parallel_for(std::size_t{0}, local_, [&](std::size_t e) {
    const auto& rows = by_expert[e];
    if (rows.empty()) return;
    const std::size_t m = rows.size();
    Rows in(m * width);
    for (std::size_t i = 0; i < m; ++i)
      std::memcpy(&in[i * width], &received[rows[i].first * rec + records.latent_at],
                  width * sizeof(float));
    expert(e, in, m, expert_out[e]);
  });
  Rows back(nrec * width, 0.0f);
  for (std::size_t e = 0; e < local_; ++e) {
    const auto& rows = by_expert[e];
    for (std::size_t i = 0; i < rows.size(); ++i) {
      float* dst = &back[rows[i].first * width];
      const float wt = rows[i].second;
      const float* d = &expert_out[e][i * width];
      for (std::size_t j = 0; j < width; ++j) dst[j] += wt * d[j];
    }
  }
  return back;
}

Rows ExpertDispatcher::run(std::span<const Route> routes, std::span<const float> z, std::size_t n,
                           const LocalExpert& expert) const {
  Records records(top_k_, latent_);
  const std::size_t width = latent_, rec = records.size;
  const bool shares_tokens = groups_->moe_tp().size() > 1;
  std::vector<int> member_tokens{static_cast<int>(n)};  // per moe-tp member, in rank order
  // Without MoE-TP the rank dispatches its own tokens straight from `routes` and `z`.
  const std::vector<char> tokens =
      shares_tokens ? share_tokens(routes, z, n, records, member_tokens) : std::vector<char>{};
  const std::size_t group_tokens = shares_tokens ? tokens.size() / rec : n;
  auto token = [&](std::size_t i) -> const void* {
    if (shares_tokens) return records.read(&tokens[i * rec]);
    records.read_routes(routes, i);
    return &z[i * width];
  };
  std::vector<std::vector<std::size_t>> sent_token;
  const dist::Gathered<char> recv = dispatch(group_tokens, records, token, sent_token);
  Rows back = run_local(recv.data, records, expert);

  // 4. Back to the senders: one latent row per record each sent (so the receive counts are known).
  const std::size_t owners = sent_token.size();
  std::vector<int> back_counts(owners), returned_counts(owners);
  for (std::size_t s = 0; s < owners; ++s) {
    back_counts[s] = recv.counts[s] / static_cast<int>(rec) * static_cast<int>(width);
    returned_counts[s] = static_cast<int>(sent_token[s].size() * width);
  }
  const auto returned =
      owners == 1 ? dist::Gathered<float>{std::move(back), back_counts, {0}}
                  : dist::alltoallv(groups_->moe_ep(), std::span<const float>(back), back_counts,
                                    std::move(returned_counts));
  Rows y(group_tokens * width, 0.0f);
  for (std::size_t src = 0; src < owners; ++src) {
    const float* part = returned.data.data() + returned.displs[src];
    for (std::size_t j = 0; j < sent_token[src].size(); ++j) {
      float* dst = &y[sent_token[src][j] * width];
      for (std::size_t l = 0; l < width; ++l) dst[l] += part[j * width + l];
    }
  }

  // 5. Each expert slice gave a partial output for the group's tokens: every member receives the
  //    partial outputs of its own tokens and adds them in rank order.
  if (!shares_tokens) return y;
  std::vector<int> counts_back;
  for (int t : member_tokens) counts_back.push_back(t * static_cast<int>(width));
  return dist::reduce_scatter_sum_ordered(groups_->moe_tp(), y, counts_back);
}

}  // namespace k3::model::engine
