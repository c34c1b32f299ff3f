#include "model/engine/kda.h"

#include <algorithm>
#include <cmath>

#include "model/engine/ops_kernels.h"

namespace k3::model::engine {

void kda_recurrent(KdaHead& in, float* S, float* work) {
  const std::size_t K = in.dim, V = in.dim;
  const detail::MathKernels& math = detail::math_kernels(quant::active_isa());
  std::vector<float> u(V), alpha(K);
  for (std::size_t t = 0; t < in.tokens; ++t) {
    const float* g = &in.g[t * K];
    for (std::size_t i = 0; i < K; ++i) alpha[i] = std::exp(g[i]);
    // S = diag(exp(g)) S; u = S^T k; S += k (beta (v - u))^T; o = S^T q (after the update).
    // With work, the first token goes from S into it and S is only read.
    const float* from = work && t > 0 ? work : S;
    float* to = work ? work : S;
    math.kda_token(from, to, V, K, V, alpha.data(), &in.k[t * K], &in.q[t * K], &in.v[t * V],
                   in.beta[t], u.data(), &in.o[t * V]);
  }
}

void kda_chunked(KdaHead& in, float* S, std::size_t chunk, float gate_lower_bound) {
  const std::size_t K = in.dim, V = in.dim;
  // Inside a chunk the decays factor as exp(gc_i - gc_j) = exp(gc_i) exp(-gc_j), which turns
  // the pairwise sums into products without an exp per pair. Both factors must stay inside
  // float's range: every g is above the gate's lower bound, so chunks of at most 80/|bound|
  // tokens keep |gc| <= 80 (exp(80) ~ 5.5e34 < FLT_MAX, exp(-80) ~ 1.8e-35 > FLT_MIN).
  const float bound = std::max(std::fabs(gate_lower_bound), 1e-3f);
  const std::size_t safe = std::max<std::size_t>(1, static_cast<std::size_t>(80.0f / bound));
  chunk = std::min(chunk, safe);
  std::vector<float> gc, kp, qp, kn, A, w, u, Aqk, vn;
  for (std::size_t start = 0; start < in.tokens; start += chunk) {
    const std::size_t C = std::min(chunk, in.tokens - start);
    const float* q = &in.q[start * K];
    const float* k = &in.k[start * K];
    const float* v = &in.v[start * V];
    const float* beta = &in.beta[start];
    // Cumulative log-decay inside the chunk, and k, q scaled by exp(+-gc).
    gc.assign(C * K, 0.0f);
    kp.resize(C * K);
    qp.resize(C * K);
    kn.resize(C * K);
    for (std::size_t i = 0; i < C; ++i)
      for (std::size_t d = 0; d < K; ++d) {
        const float g = in.g[(start + i) * K + d] + (i > 0 ? gc[(i - 1) * K + d] : 0.0f);
        gc[i * K + d] = g;
        const float e = std::exp(g);
        kp[i * K + d] = k[i * K + d] * e;
        qp[i * K + d] = q[i * K + d] * e;
        kn[i * K + d] = k[i * K + d] / e;
      }
    // A[i][j] = -beta_i kp_i . kn_j (j < i); Aqk[i][j] = qp_i . kn_j (j <= i).
    A.assign(C * C, 0.0f);
    Aqk.assign(C * C, 0.0f);
    for (std::size_t i = 0; i < C; ++i)
      for (std::size_t j = 0; j <= i; ++j) {
        float kk = 0, qk = 0;
        for (std::size_t d = 0; d < K; ++d) {
          kk += kp[i * K + d] * kn[j * K + d];
          qk += qp[i * K + d] * kn[j * K + d];
        }
        if (j < i) A[i * C + j] = -kk * beta[i];
        Aqk[i * C + j] = qk;
      }
    // (I + A)^-1 by forward substitution (naive_chunk_kda's order), then columns scaled by beta.
    for (std::size_t i = 1; i < C; ++i)
      for (std::size_t j = 0; j < i; ++j) {
        float add = 0;
        for (std::size_t m = j + 1; m < i; ++m) add += A[i * C + m] * A[m * C + j];
        A[i * C + j] += add;
      }
    for (std::size_t i = 0; i < C; ++i) {
      A[i * C + i] += 1.0f;
      for (std::size_t j = 0; j <= i; ++j) A[i * C + j] *= beta[j];
    }
    // w = A kp, u = A v, v_new = u - w S.
    w.assign(C * K, 0.0f);
    u.assign(C * V, 0.0f);
    for (std::size_t i = 0; i < C; ++i)
      for (std::size_t j = 0; j <= i; ++j) {
        const float a = A[i * C + j];
        for (std::size_t d = 0; d < K; ++d) w[i * K + d] += a * kp[j * K + d];
        for (std::size_t d = 0; d < V; ++d) u[i * V + d] += a * v[j * V + d];
      }
    vn = u;
    for (std::size_t i = 0; i < C; ++i)
      for (std::size_t d = 0; d < K; ++d) {
        const float wid = w[i * K + d];
        const float* row = S + d * V;
        for (std::size_t e = 0; e < V; ++e) vn[i * V + e] -= wid * row[e];
      }
    // o = qp S + Aqk v_new.
    for (std::size_t i = 0; i < C; ++i) {
      float* o = &in.o[(start + i) * V];
      std::fill(o, o + V, 0.0f);
      for (std::size_t d = 0; d < K; ++d) {
        const float qd = qp[i * K + d];
        const float* row = S + d * V;
        for (std::size_t e = 0; e < V; ++e) o[e] += qd * row[e];
      }
      for (std::size_t j = 0; j <= i; ++j) {
        const float a = Aqk[i * C + j];
        for (std::size_t e = 0; e < V; ++e) o[e] += a * vn[j * V + e];
      }
    }
    // S = exp(g_last) S + (exp(g_last) kn)^T v_new.
    const float* last = &gc[(C - 1) * K];
    for (std::size_t d = 0; d < K; ++d) {
      const float decay = std::exp(last[d]);
      float* row = S + d * V;
      for (std::size_t e = 0; e < V; ++e) row[e] *= decay;
      for (std::size_t i = 0; i < C; ++i) {
        const float kd = decay * kn[i * K + d];
        for (std::size_t e = 0; e < V; ++e) row[e] += kd * vn[i * V + e];
      }
    }
  }
}

}  // namespace k3::model::engine
