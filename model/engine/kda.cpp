#include "model/engine/kda.h"

#include <algorithm>
#include <cmath>

namespace k3::model::engine {

void kda_recurrent(KdaHead& in, float* S) {
  const std::size_t K = in.dim, V = in.dim;
  std::vector<float> u(V);
  for (std::size_t t = 0; t < in.tokens; ++t) {
    const float* q = &in.q[t * K];
    const float* k = &in.k[t * K];
    const float* g = &in.g[t * K];
    const float* v = &in.v[t * V];
    const float beta = in.beta[t];
    // S = diag(exp(g)) S; u = S^T k; S += k (beta (v - u))^T; o = S^T q (after the update).
    std::fill(u.begin(), u.end(), 0.0f);
    for (std::size_t i = 0; i < K; ++i) {
      const float alpha = std::exp(g[i]);
      float* row = S + i * V;
      for (std::size_t j = 0; j < V; ++j) {
        row[j] *= alpha;
        u[j] += row[j] * k[i];
      }
    }
    for (std::size_t j = 0; j < V; ++j) u[j] = beta * (v[j] - u[j]);
    float* o = &in.o[t * V];
    std::fill(o, o + V, 0.0f);
    for (std::size_t i = 0; i < K; ++i) {
      float* row = S + i * V;
      for (std::size_t j = 0; j < V; ++j) {
        row[j] += k[i] * u[j];
        o[j] += row[j] * q[i];
      }
    }
  }
}

void kda_chunked(KdaHead& in, float* S, std::size_t chunk) {
  const std::size_t K = in.dim, V = in.dim;
  std::vector<float> gc, A, w, u, Aqk, vn;
  for (std::size_t start = 0; start < in.tokens; start += chunk) {
    const std::size_t C = std::min(chunk, in.tokens - start);
    const float* q = &in.q[start * K];
    const float* k = &in.k[start * K];
    const float* v = &in.v[start * V];
    const float* beta = &in.beta[start];
    // Cumulative log-decay inside the chunk.
    gc.assign(C * K, 0.0f);
    for (std::size_t i = 0; i < C; ++i)
      for (std::size_t d = 0; d < K; ++d)
        gc[i * K + d] = in.g[(start + i) * K + d] + (i > 0 ? gc[(i - 1) * K + d] : 0.0f);
    // A[i][j] = -beta_i sum_d k_i exp(gc_i - gc_j) k_j (j < i); Aqk the same with q_i, j <= i.
    A.assign(C * C, 0.0f);
    Aqk.assign(C * C, 0.0f);
    for (std::size_t i = 0; i < C; ++i)
      for (std::size_t j = 0; j <= i; ++j) {
        float kk = 0, qk = 0;
        for (std::size_t d = 0; d < K; ++d) {
          const float e = std::exp(gc[i * K + d] - gc[j * K + d]) * k[j * K + d];
          kk += k[i * K + d] * e;
          qk += q[i * K + d] * e;
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
    // w = A (exp(gc) k), u = A v, v_new = u - w S.
    w.assign(C * K, 0.0f);
    u.assign(C * V, 0.0f);
    for (std::size_t i = 0; i < C; ++i)
      for (std::size_t j = 0; j <= i; ++j) {
        const float a = A[i * C + j];
        for (std::size_t d = 0; d < K; ++d)
          w[i * K + d] += a * std::exp(gc[j * K + d]) * k[j * K + d];
        for (std::size_t d = 0; d < V; ++d) u[i * V + d] += a * v[j * V + d];
      }
    vn = u;
    for (std::size_t i = 0; i < C; ++i)
      for (std::size_t d = 0; d < K; ++d) {
        const float wid = w[i * K + d];
        const float* row = S + d * V;
        for (std::size_t e = 0; e < V; ++e) vn[i * V + e] -= wid * row[e];
      }
    // o = (q exp(gc)) S + Aqk v_new.
    for (std::size_t i = 0; i < C; ++i) {
      float* o = &in.o[(start + i) * V];
      std::fill(o, o + V, 0.0f);
      for (std::size_t d = 0; d < K; ++d) {
        const float qd = q[i * K + d] * std::exp(gc[i * K + d]);
        const float* row = S + d * V;
        for (std::size_t e = 0; e < V; ++e) o[e] += qd * row[e];
      }
      for (std::size_t j = 0; j <= i; ++j) {
        const float a = Aqk[i * C + j];
        for (std::size_t e = 0; e < V; ++e) o[e] += a * vn[j * V + e];
      }
    }
    // S = exp(g_last) S + (exp(g_last - gc) k)^T v_new.
    const float* last = &gc[(C - 1) * K];
    for (std::size_t d = 0; d < K; ++d) {
      const float decay = std::exp(last[d]);
      float* row = S + d * V;
      for (std::size_t e = 0; e < V; ++e) row[e] *= decay;
    }
    for (std::size_t i = 0; i < C; ++i)
      for (std::size_t d = 0; d < K; ++d) {
        const float kd = std::exp(last[d] - gc[i * K + d]) * k[i * K + d];
        float* row = S + d * V;
        for (std::size_t e = 0; e < V; ++e) row[e] += kd * vn[i * V + e];
      }
  }
}

}  // namespace k3::model::engine
