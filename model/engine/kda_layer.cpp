// Section 2.4: the KDA block over this rank's heads (the recurrence itself is kda.h).
#include "model/engine/engine_impl.h"

#include <algorithm>
#include <cmath>

#include <oneapi/tbb/parallel_for.h>

#include "model/engine/kda.h"
#include "model/engine/ops.h"

namespace k3::model::engine {

using namespace detail;

namespace {

// Step 1's causal depthwise conv of one projection over n tokens, every channel at once.
// `history` holds the `past` previous inputs (oldest first) then the n new ones, [past + n][P];
// `taps` is [past + 1][P] (KdaLayer::conv_q). Each output is the current input's product, then
// the history's added oldest first, as reference::causal_conv_step adds them.
void causal_conv(const float* history, std::size_t n, std::size_t P, std::size_t past,
                 const float* taps, float* out) {
  const float* current_tap = taps + past * P;
  for (std::size_t t = 0; t < n; ++t) {
    float* o = out + t * P;
    const float* current = history + (t + past) * P;
    for (std::size_t ch = 0; ch < P; ++ch) o[ch] = current_tap[ch] * current[ch];
    for (std::size_t j = 0; j < past; ++j) {
      const float* tap = taps + j * P;
      const float* earlier = history + (t + j) * P;
      for (std::size_t ch = 0; ch < P; ++ch) o[ch] += tap[ch] * earlier[ch];
    }
  }
}

// A reused head's buffers for n tokens, given back first when far above that need (the rule of
// detail::zeroed, at 1 MiB: one head's share of a step is small).
void fit(KdaHead& head, std::size_t n, std::size_t D) {
  if (far_above_need(head.q.capacity(), n * D, std::size_t{1} << 20)) head = KdaHead{};
  head.resize(n, D);
}

}  // namespace

// Section 2.4, KDA over this rank's heads.
void Engine::Impl::kda(const KdaLayer& w, const Rows& x, std::span<const StepSequence> batch,
                       const BatchRows& br, Rows& out) {
  // The section's notation: hidden H, head dim D, this rank's projection width P = heads x D.
  const std::size_t H = hidden, D = kda_dim, P = kda_width, kernel = conv_kernel;
  const std::size_t T = br.total;
  const std::size_t past = kernel - 1;
  Rows& q = scratch_rows(0, T * P);
  Rows& k = scratch_rows(1, T * P);
  Rows& v = scratch_rows(2, T * P);
  Rows& fa = scratch_rows(3, T * D);
  Rows& z = scratch_rows(4, T * P);
  Rows& b = scratch_rows(5, T * kda_heads);
  Rows& gate = scratch_rows(6, T * P);
  SharedInput in(x, T);
  in.apply(w.q, q);
  in.apply(w.k, k);
  in.apply(w.v, v);
  in.apply(w.f_a, fa);
  w.f_b.apply(fa, T, z);
  in.apply(w.b, b);
  in.apply(w.g, gate);
  const float lower = static_cast<float>(c.kda_gate_lower_bound);
  const float q_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));

  // The gates of every token at once: decay sigmoid(A (f_b f_a x + dt_bias)) (scaled by the
  // lower bound below), beta = sigmoid(b x), the output gate sigmoid(g x).
  Rows& decay_gate = scratch_rows(7, T * P);
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t h = 0; h < kda_heads; ++h)
      for (std::size_t d = 0; d < D; ++d) {
        const std::size_t ch = h * D + d;
        decay_gate[t * P + ch] = w.decay[h] * (z[t * P + ch] + w.dt_bias[ch]);
      }
  sigmoid_rows(decay_gate);
  sigmoid_rows(b);
  sigmoid_rows(gate);

  // 1. Causal depthwise conv (over the window of previous pre-conv inputs) then SiLU. A verify
  //    step leaves the window alone and keeps its tokens' inputs for Engine::commit.
  Rows& o = scratch_rows(8, T * P);
  Rows* proj[3] = {&q, &k, &v};
  const std::vector<float>* taps[3] = {&w.conv_q, &w.conv_k, &w.conv_v};
  Rows& history = scratch_rows(9, 0);  // sized per sequence below
  for (std::size_t i = 0; i < batch.size(); ++i) {
    Slot& s = slots[static_cast<std::size_t>(batch[i].slot)];
    const auto layer = static_cast<std::size_t>(w.state_index);
    const std::size_t n = br.count[i], off = br.offset[i];
    if (batch[i].speculative) {
      s.conv_inputs[layer].resize(3 * n * P);
      s.kda_pending[layer].resize(kda_heads);
    }
    for (std::size_t which = 0; which < 3; ++which) {
      float* window = s.conv[layer].data() + which * past * P;
      float* rows = proj[which]->data() + off * P;
      history.resize((past + n) * P);
      std::copy_n(window, past * P, history.data());
      std::copy_n(rows, n * P, history.data() + past * P);
      if (batch[i].speculative) {
        std::copy_n(rows, n * P, s.conv_inputs[layer].data() + which * n * P);
      } else {
        std::copy_n(history.data() + n * P, past * P, window);
      }
      causal_conv(history.data(), n, P, past, taps[which]->data(), rows);
      silu_rows(std::span<float>(rows, n * P));
    }
  }
  // 2-6 per (sequence, head), in parallel: l2 norms, the decay gate, beta, the delta rule over
  // the sequence's tokens, the per-head RMSNorm and the output gate. Each pair owns its state
  // and its output columns, so the order does not matter.
  const std::size_t pairs = batch.size() * kda_heads;
  if (scratch.kda_heads.size() < pairs) scratch.kda_heads.resize(pairs);
  if (scratch.kda_work.size() < pairs) scratch.kda_work.resize(pairs);
  oneapi::tbb::parallel_for(std::size_t{0}, pairs, [&](std::size_t pair) {
    const std::size_t i = pair / kda_heads, h = pair % kda_heads;
    Slot& slot = slots[static_cast<std::size_t>(batch[i].slot)];
    const std::size_t n = br.count[i], off = br.offset[i];
    const auto layer = static_cast<std::size_t>(w.state_index);
    // A verify step's head inputs stay in the slot for Engine::commit (reusing its buffers).
    KdaHead& head = batch[i].speculative ? slot.kda_pending[layer][h] : scratch.kda_heads[pair];
    fit(head, n, D);
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t t = off + j;
      float* qh = &head.q[j * D];
      float* kh = &head.k[j * D];
      std::copy_n(&q[t * P + h * D], D, qh);
      std::copy_n(&k[t * P + h * D], D, kh);
      std::copy_n(&v[t * P + h * D], D, &head.v[j * D]);
      l2_norm(qh, D, kL2Eps);
      l2_norm(kh, D, kL2Eps);
      for (std::size_t d = 0; d < D; ++d) {
        qh[d] *= q_scale;
        const std::size_t ch = h * D + d;
        head.g[j * D + d] = lower * decay_gate[t * P + ch];
      }
      head.beta[j] = b[t * kda_heads + h];
    }
    float* S = &slot.kda[layer][h * D * D];
    if (batch[i].speculative) {
      // The token recurrence from the state, which it leaves alone, in a scratch state;
      // Engine::commit replays the accepted tokens on the state.
      std::vector<float>& work = scratch.kda_work[pair];
      work.resize(D * D);
      kda_recurrent(head, S, work.data());
    } else if (n > 1 && opt.kda_chunk > 0) {
      kda_chunked(head, S, opt.kda_chunk, lower);
    } else {
      kda_recurrent(head, S);
    }
    // 6. RMSNorm per head (o_norm, the decoder eps), then the sigmoid output gate.
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t t = off + j;
      float* dst = &o[t * P + h * D];
      rms_norm(&head.o[j * D], 1, D, w.o_norm, c.rms_norm_eps, dst);
      for (std::size_t d = 0; d < D; ++d) dst[d] *= gate[t * P + h * D + d];
    }
  });
  out.assign(T * H, 0.0f);
  w.o.apply(o, T, out);  // row-parallel: summed over attention TP
}

}  // namespace k3::model::engine
