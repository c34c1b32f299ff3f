// Section 2.5: the LatentMoE block (the dense SiTU-GLU is the parallel tier's ParallelMlp).
#include "model/engine/engine_impl.h"

#include <algorithm>

#include "model/engine/ops.h"

namespace k3::model::engine {

using namespace detail;

// Section 2.5, LatentMoE: this rank's share of the tokens is routed and projected to the latent
// width, the experts run where they live (the dispatcher), and the shares are put back together.
void Engine::Impl::moe(const Moe& w, const Rows& x, std::size_t n, Rows& out) {
  const std::size_t latent = static_cast<std::size_t>(c.routed_expert_hidden_size);
  const std::size_t E = static_cast<std::size_t>(c.num_experts);
  const int k = c.num_experts_per_token;
  const std::size_t ku = static_cast<std::size_t>(k);

  const TokenShares shares(groups.attn_tp(), n);
  const std::vector<std::size_t>& share = shares.mine();
  const std::size_t ns = share.size();
  Rows xs;  // this rank's share of the rows, unless that is all of them
  if (ns < n) {
    xs.resize(ns * hidden);
    for (std::size_t i = 0; i < ns; ++i)
      std::copy_n(&x[share[i] * hidden], hidden, &xs[i * hidden]);
  }
  Rows logits(ns * E), z(ns * latent);
  SharedInput share_in(ns < n ? std::span<const float>(xs) : std::span<const float>(x), ns);
  share_in.apply(w.router, logits);
  share_in.apply(w.down_proj, z);
  std::vector<Route> routes(ns * ku);
  for (std::size_t i = 0; i < ns; ++i) {
    route_top_k(std::span<const float>(logits).subspan(i * E, E), w.bias, k,
                static_cast<float>(c.routed_scaling_factor),
                std::span<Route>(routes).subspan(i * ku, ku));
  }

  const float beta = static_cast<float>(c.situ_beta);
  const float linear_beta = static_cast<float>(c.situ_linear_beta);
  // An expert's gate and up are one product ([gate | up] per row); SiTU row by row, then the
  // rows' activations packed together for the down projection.
  // The experts run in parallel, each in its own buffer.
  auto& gate_up = scratch.expert_gate_up;
  if (gate_up.size() < w.w13.size()) gate_up.resize(w.w13.size());
  Rows y = experts->run(
      routes, z, ns, [&](std::size_t e, std::span<const float> in, std::size_t m, Rows& d) {
        const std::size_t inner = w.w13[e].rows() / 2;
        Rows& gu = zeroed(gate_up[e], m * 2 * inner);
        w.w13[e].apply(in, m, gu);
        for (std::size_t i = 0; i < m; ++i) {
          float* gate = &gu[i * 2 * inner];
          situ_rows(std::span<float>(gate, inner), std::span<const float>(gate + inner, inner),
                    beta, linear_beta);
          if (i > 0) std::copy_n(gate, inner, &gu[i * inner]);
        }
        d.resize(m * latent);
        w.w2[e].apply(std::span<const float>(gu).first(m * inner), m, d);
      });
  rms_norm(y.data(), ns, latent, w.norm, c.rms_norm_eps, y.data());
  Rows up(ns * hidden);
  w.up_proj.apply(y, ns, up);
  out = shares.assemble(std::move(up), hidden);
  if (w.shared) {
    Rows shared;
    w.shared->apply(x, n, shared);
    for (std::size_t i = 0; i < n * hidden; ++i) out[i] += shared[i];
  }
}

}  // namespace k3::model::engine
