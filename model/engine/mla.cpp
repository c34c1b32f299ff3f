// Gated NoPE MLA (KimiMLAAttention in the official modeling_kimi_linear.py of moonshotai/Kimi-K3; docs/ENGINE.md,
// "The math, piece by piece", 2.3), absorbed, over this rank's heads.
#include "model/engine/engine_impl.h"

#include <algorithm>
#include <cmath>

#include <oneapi/tbb/parallel_for.h>

#include "model/engine/ops.h"
#include "quant/gemm_f32.h"
#include "quant/reference.h"

namespace k3::model::engine {

using namespace detail;

// Section 2.3, gated NoPE MLA in the absorbed form: attention runs over the cached normed
// latent and shared k_rot, per head q_lat = K_h^T q_nope and o_h = V_h (sum_j alpha_j latent_j).
void Engine::Impl::mla(const MlaLayer& w, const Rows& x, std::span<const StepSequence> batch,
                       const BatchRows& br, Rows& out) {
  // The section's notation: hidden H, per-head nope N and rope R dims, v dim Vd, latent KL.
  const std::size_t H = hidden, N = nope_dim, R = rope_dim, Vd = v_dim, KL = kv_lora;
  const std::size_t T = br.total;
  const std::size_t QL = static_cast<std::size_t>(c.q_lora_rank);
  const std::size_t QH = N + R;
  const std::size_t C = KL + R;  // one cache row
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(N + R)));

  Rows& qa = scratch_rows(0, T * QL);
  Rows& q = scratch_rows(1, T * mla_heads * QH);
  Rows& kv = scratch_rows(2, T * C);
  Rows& gate = scratch_rows(3, T * mla_heads * Vd);
  SharedInput in(x, T);
  in.apply(w.q_a, qa);
  rms_norm(qa.data(), T, QL, w.q_a_norm, kLowRankEps, qa.data());
  w.q_b.apply(qa, T, q);
  in.apply(w.kv_a, kv);
  // The latent is normed, k_rot is neither normed nor rotated; both go to the cache.
  for (std::size_t t = 0; t < T; ++t)
    rms_norm(&kv[t * C], 1, KL, w.kv_a_norm, kLowRankEps, &kv[t * C]);
  in.apply(w.g, gate);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    auto& cache =
        slots[static_cast<std::size_t>(batch[i].slot)].mla[static_cast<std::size_t>(w.cache_index)];
    cache.insert(cache.end(), kv.begin() + static_cast<std::ptrdiff_t>(br.offset[i] * C),
                 kv.begin() + static_cast<std::ptrdiff_t>((br.offset[i] + br.count[i]) * C));
  }

  // Per head: q_lat = K_h^T q_nope for every token of the step (one product per head).
  Rows& q_lat = scratch_rows(4, mla_heads * T * KL);
  Rows& q_nope_all = scratch_rows(5, mla_heads * T * N);
  oneapi::tbb::parallel_for(std::size_t{0}, mla_heads, [&](std::size_t h) {
    float* q_nope = q_nope_all.data() + h * T * N;  // T may be 0: no element to index
    for (std::size_t t = 0; t < T; ++t)
      std::copy_n(&q[(t * mla_heads + h) * QH], N, &q_nope[t * N]);
    w.k_absorb[h].apply(std::span<const float>(q_nope, T * N), T,
                        std::span<float>(q_lat).subspan(h * T * KL, T * KL));
  });
  // Attention per sequence over its cache, in blocks of query tokens: the scores of every
  // (token, head) row against every cached position are one F32 product with the cache as the
  // matrix; causality masks the positions after each token.
  constexpr std::size_t kQueryBlock = 64;
  Rows& o_lat = scratch_rows(6, mla_heads * T * KL);
  Rows& qfull = scratch_rows(9, 0);  // sized per block below
  Rows& scores = scratch_rows(10, 0);
  std::vector<std::size_t> seen;  // per query row of a block: the positions it attends to
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto& cache =
        slots[static_cast<std::size_t>(batch[i].slot)].mla[static_cast<std::size_t>(w.cache_index)];
    const std::size_t total = cache.size() / C;
    const std::size_t first = total - br.count[i];  // position of the chunk's first token
    quant::MatrixView keys;
    keys.type = quant::Type::kF32;
    keys.cols = C;
    for (std::size_t j0 = 0; j0 < br.count[i]; j0 += kQueryBlock) {
      const std::size_t nq = std::min(kQueryBlock, br.count[i] - j0);
      const std::size_t visible = first + j0 + nq;  // positions the block's last token sees
      keys.rows = visible;
      keys.data = std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(cache.data()),
                                                visible * C * sizeof(float));
      const std::size_t rows = nq * mla_heads;
      qfull.resize(rows * C);
      for (std::size_t j = 0; j < nq; ++j) {
        const std::size_t t = br.offset[i] + j0 + j;
        for (std::size_t h = 0; h < mla_heads; ++h) {
          float* dst = &qfull[(j * mla_heads + h) * C];
          const float* ql = &q_lat[(h * T + t) * KL];
          for (std::size_t d = 0; d < KL; ++d) dst[d] = ql[d] * scale;
          const float* qr = &q[(t * mla_heads + h) * QH + N];
          for (std::size_t d = 0; d < R; ++d) dst[KL + d] = qr[d] * scale;
        }
      }
      scores.resize(rows * visible);
      Linear(keys, false).apply(qfull, rows, scores);
      // Softmax of each row over its visible positions, in place: the attention weights.
      seen.resize(nq);
      for (std::size_t j = 0; j < nq; ++j) {
        const std::size_t n = first + j0 + j + 1;  // causal: positions 0..first+j0+j
        seen[j] = n;
        for (std::size_t h = 0; h < mla_heads; ++h) {
          float* sc = &scores[(j * mla_heads + h) * visible];
          const float top = *std::max_element(sc, sc + n);
          double sum = 0;
          for (std::size_t p = 0; p < n; ++p) sum += (sc[p] = std::exp(sc[p] - top));
          const float inv = static_cast<float>(1.0 / sum);
          for (std::size_t p = 0; p < n; ++p) sc[p] *= inv;
        }
      }
      // Per head, the weighted sum of the cached latents is one F32 product: the block's rows
      // of weights [nq, visible] (stride: all heads) times the cache [visible, KL] (stride C,
      // the k_rot columns skipped), each row over its own causal length.
      for (std::size_t h = 0; h < mla_heads; ++h) {
        quant::gemm_f32_nn(nq, KL, visible, &scores[h * visible], mla_heads * visible, cache.data(),
                           C, &o_lat[(h * T + br.offset[i] + j0) * KL], KL, seen);
      }
    }
  }
  // o_h = V_h o_lat, gated by sigmoid(g_proj x).
  Rows& o = scratch_rows(7, T * mla_heads * Vd);
  Rows& v_all = scratch_rows(8, mla_heads * T * Vd);
  sigmoid_rows(gate);
  oneapi::tbb::parallel_for(std::size_t{0}, mla_heads, [&](std::size_t h) {
    const std::span<float> v(v_all.data() + h * T * Vd, T * Vd);
    w.v_up[h].apply(std::span<const float>(o_lat).subspan(h * T * KL, T * KL), T, v);
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t d = 0; d < Vd; ++d) {
        const std::size_t at = (t * mla_heads + h) * Vd + d;
        o[at] = v[t * Vd + d] * gate[at];
      }
  });
  out.assign(T * H, 0.0f);
  w.o.apply(o, T, out);  // row-parallel: summed over attention TP
}

}  // namespace k3::model::engine
