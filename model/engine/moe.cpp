// Section 2.5: the dense SiTU-GLU MLP over its group and the LatentMoE with expert parallelism.
#include "model/engine/engine_impl.h"

#include <algorithm>
#include <cstring>
#include <string>

#include <oneapi/tbb/parallel_for.h>

#include "common/error.h"
#include "dist/collectives.h"
#include "model/engine/ops.h"

namespace k3::model::engine {

using namespace detail;

void Engine::Impl::mlp_over(const Mlp& w, dist::GroupKind group, const Rows& x, std::size_t n,
                            Rows& out) {
  const Gathered in = rows_over(group, x, n, H);
  const std::size_t I = w.gate.rows();
  Rows g(in.total * I), u(in.total * I), y(in.total * H, 0.0f);
  SharedInput shared(in.rows, in.total);
  shared.apply(w.gate, g);
  shared.apply(w.up, u);
  situ_rows(g, u, static_cast<float>(c.situ_beta), static_cast<float>(c.situ_linear_beta));
  w.down.apply(g, in.total, y);
  const dist::Comm& comm = comm_over(group);
  if (comm.size() > 1) dist::allreduce_sum_ordered(comm, std::span<float>(y));
  out.assign(y.begin() + static_cast<std::ptrdiff_t>(in.mine * H),
             y.begin() + static_cast<std::ptrdiff_t>((in.mine + n) * H));
}

// Section 2.5, LatentMoE with expert parallelism (see the header comment for the exchange).
void Engine::Impl::moe(const Moe& w, const Rows& x, std::size_t n, Rows& out) {
  const std::size_t a = static_cast<std::size_t>(layout.attn_tp());
  const std::size_t ai = static_cast<std::size_t>(me.attn_tp_rank);
  const std::size_t LT = static_cast<std::size_t>(c.routed_expert_hidden_size);
  const std::size_t E = static_cast<std::size_t>(c.num_experts);
  const int k = c.num_experts_per_token;
  const std::size_t ku = static_cast<std::size_t>(k);

  // This rank's share: tokens t with t mod a == its attention-TP rank.
  std::vector<std::size_t> share;
  for (std::size_t t = ai; t < n; t += a) share.push_back(t);
  const std::size_t ns = share.size();
  Rows xs(ns * H);
  for (std::size_t i = 0; i < ns; ++i) std::copy_n(&x[share[i] * H], H, &xs[i * H]);
  Rows logits(ns * E), z(ns * LT);
  SharedInput share_in(xs, ns);
  share_in.apply(w.router, logits);
  share_in.apply(w.down_proj, z);
  std::vector<Route> routes(ns * ku);
  for (std::size_t i = 0; i < ns; ++i) {
    route_top_k(std::span<const float>(logits).subspan(i * E, E), w.bias, k,
                static_cast<float>(c.routed_scaling_factor),
                std::span<Route>(routes).subspan(i * ku, ku));
  }

  // Dispatch: one record per (token, destination rank), as bytes: k int32 expert ids (-1: not
  // for this rank), k float weights, then the latent.
  const std::size_t ids_bytes = ku * sizeof(std::int32_t);
  const std::size_t weights_bytes = ku * sizeof(float);
  const std::size_t latent_at = ids_bytes + weights_bytes;
  const std::size_t rec = latent_at + LT * sizeof(float);
  const dist::Comm& tp = groups.tp();
  const std::size_t nr = static_cast<std::size_t>(tp.size());
  std::vector<std::vector<char>> per_dest(nr);
  std::vector<std::vector<std::size_t>> sent_token(nr);
  std::vector<std::int32_t> ids(ku);
  std::vector<float> weights(ku);
  for (std::size_t i = 0; i < ns; ++i) {
    std::vector<std::size_t> owners;
    for (std::size_t r = 0; r < ku; ++r) {
      const std::size_t owner =
          static_cast<std::size_t>(routes[i * ku + r].expert) / experts_per_owner;
      if (std::find(owners.begin(), owners.end(), owner) == owners.end()) owners.push_back(owner);
    }
    std::sort(owners.begin(), owners.end());
    for (std::size_t owner : owners) {
      for (std::size_t r = 0; r < ku; ++r) {
        const Route& route = routes[i * ku + r];
        const bool here = static_cast<std::size_t>(route.expert) / experts_per_owner == owner;
        ids[r] = here ? static_cast<std::int32_t>(route.expert) : -1;
        weights[r] = here ? route.weight : 0.0f;
      }
      for (int dest : owner_ranks[owner]) {
        auto& buf = per_dest[static_cast<std::size_t>(dest)];
        const std::size_t at = buf.size();
        buf.resize(at + rec);
        std::memcpy(&buf[at], ids.data(), ids_bytes);
        std::memcpy(&buf[at + ids_bytes], weights.data(), weights_bytes);
        std::memcpy(&buf[at + latent_at], &z[i * LT], LT * sizeof(float));
        sent_token[static_cast<std::size_t>(dest)].push_back(i);
      }
    }
  }
  std::vector<char> send;
  std::vector<int> counts(nr);
  for (std::size_t d = 0; d < nr; ++d) {
    counts[d] = dist::checked_count(per_dest[d].size(), "MoE dispatch");
    send.insert(send.end(), per_dest[d].begin(), per_dest[d].end());
  }
  const auto recv = dist::alltoallv(tp, std::span<const char>(send), counts);

  // The owner side: group the received (record, weight) pairs by local expert, run each expert
  // once over its rows, and accumulate the weighted outputs per record.
  const std::size_t nrec = recv.data.size() / rec;
  const std::size_t local = w.w1.size();
  std::vector<std::vector<std::pair<std::size_t, float>>> by_expert(local);
  for (std::size_t r = 0; r < nrec; ++r) {
    std::memcpy(ids.data(), &recv.data[r * rec], ids_bytes);
    std::memcpy(weights.data(), &recv.data[r * rec + ids_bytes], weights_bytes);
    for (std::size_t j = 0; j < ku; ++j) {
      if (ids[j] < 0) continue;
      const std::int64_t e = std::int64_t{ids[j]} - w.expert_begin;
      if (e < 0 || static_cast<std::size_t>(e) >= local)
        throw InternalError("MoE dispatch: expert " + std::to_string(ids[j]) + " is not local");
      by_expert[static_cast<std::size_t>(e)].emplace_back(r, weights[j]);
    }
  }
  // Local experts in parallel, each into its own output rows; a record that chose several of
  // them sums their weighted outputs afterwards, in expert order (the same sum whatever ran
  // first).
  Rows back(nrec * LT, 0.0f);
  std::vector<Rows> expert_out(local);
  oneapi::tbb::parallel_for(std::size_t{0}, local, [&](std::size_t e) {
    const auto& rows = by_expert[e];
    if (rows.empty()) return;
    Rows zin, g, u;
    Rows& d = expert_out[e];
    const std::size_t m = rows.size();
    const std::size_t I = w.w1[e].rows();
    zin.resize(m * LT);
    for (std::size_t i = 0; i < m; ++i)
      std::memcpy(&zin[i * LT], &recv.data[rows[i].first * rec + latent_at], LT * sizeof(float));
    g.resize(m * I);
    u.resize(m * I);
    d.resize(m * LT);
    SharedInput expert_in(zin, m);
    expert_in.apply(w.w1[e], g);
    expert_in.apply(w.w3[e], u);
    situ_rows(g, u, static_cast<float>(c.situ_beta), static_cast<float>(c.situ_linear_beta));
    w.w2[e].apply(g, m, d);
  });
  for (std::size_t e = 0; e < local; ++e) {
    const auto& rows = by_expert[e];
    for (std::size_t i = 0; i < rows.size(); ++i) {
      float* dst = &back[rows[i].first * LT];
      const float wt = rows[i].second;
      const float* d = &expert_out[e][i * LT];
      for (std::size_t j = 0; j < LT; ++j) dst[j] += wt * d[j];
    }
  }
  std::vector<int> back_counts(nr);
  for (std::size_t s = 0; s < nr; ++s)
    back_counts[s] = recv.counts[s] / static_cast<int>(rec) * static_cast<int>(LT);  // records
  // Each rank gets back one latent row per record it sent: the receive counts are known.
  std::vector<int> returned_counts(nr);
  for (std::size_t s = 0; s < nr; ++s)
    returned_counts[s] = static_cast<int>(sent_token[s].size() * LT);
  const auto returned =
      dist::alltoallv(tp, std::span<const float>(back), back_counts, std::move(returned_counts));

  // Sum every destination's partial output per token, norm, up-project.
  Rows y(ns * LT, 0.0f);
  for (std::size_t src = 0; src < nr; ++src) {
    const float* part = returned.data.data() + returned.displs[src];
    for (std::size_t j = 0; j < sent_token[src].size(); ++j) {
      float* dst = &y[sent_token[src][j] * LT];
      for (std::size_t l = 0; l < LT; ++l) dst[l] += part[j * LT + l];
    }
  }
  rms_norm(y.data(), ns, LT, w.norm, c.rms_norm_eps, y.data());
  Rows up(ns * H);
  w.up_proj.apply(y, ns, up);

  // Reassemble the group's tokens from every rank's share.
  out.assign(n * H, 0.0f);
  if (a > 1) {
    std::vector<int> share_counts(a);  // rank r holds tokens r, r + a, ...
    for (std::size_t r = 0; r < a; ++r)
      share_counts[r] = static_cast<int>((n > r ? (n - r + a - 1) / a : 0) * H);
    const auto all =
        dist::allgatherv(groups.attn_tp(), std::span<const float>(up), std::move(share_counts));
    for (std::size_t r = 0; r < a; ++r) {
      const float* src = all.data.data() + all.displs[r];
      for (std::size_t t = r, i = 0; t < n; t += a, ++i) std::copy_n(src + i * H, H, &out[t * H]);
    }
  } else {
    out = std::move(up);
  }
  if (w.has_shared) {
    Rows shared;
    mlp_over(w.shared, layout.shared_experts_group(), x, n, shared);
    for (std::size_t i = 0; i < n * H; ++i) out[i] += shared[i];
  }
}

}  // namespace k3::model::engine
