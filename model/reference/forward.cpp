#include "model/reference/forward.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "common/error.h"
#include "dist/layout.h"
#include "model/load/binding.h"
#include "model/checkpoint/checkpoint.h"
#include "model/load/load_plan.h"
#include "model/load/loader.h"
#include "model/parameters.h"
#include "model/load/pipeline.h"
#include "quant/reference.h"

namespace k3::model {

namespace reference {

Matrix dequantize_matrix(const quant::MatrixView& view) {
  std::vector<float> f(view.rows * view.cols);
  quant::dequantize(view, f);
  Matrix m;
  m.rows = view.rows;
  m.cols = view.cols;
  m.values.assign(f.begin(), f.end());
  return m;
}

std::vector<double> matvec(const Matrix& w, std::span<const double> x) {
  if (x.size() != w.cols) {
    throw InternalError("reference matvec: input of " + std::to_string(x.size()) +
                        " for a matrix with " + std::to_string(w.cols) + " columns");
  }
  std::vector<double> out(w.rows);
  for (std::size_t r = 0; r < w.rows; ++r) {
    const auto row = w.row(r);
    double acc = 0;
    for (std::size_t c = 0; c < w.cols; ++c) acc += row[c] * x[c];
    out[r] = acc;
  }
  return out;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double silu(double x) { return x * sigmoid(x); }

std::vector<double> rms_norm(std::span<const double> x, std::span<const double> weight,
                             double eps) {
  double sum_sq = 0;
  for (double v : x) sum_sq += v * v;
  const double inv = 1.0 / std::sqrt(sum_sq / static_cast<double>(x.size()) + eps);
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = weight[i] * (x[i] * inv);
  return out;
}

std::vector<double> l2_norm(std::span<const double> x, double eps) {
  double sum_sq = 0;
  for (double v : x) sum_sq += v * v;
  const double inv = 1.0 / std::sqrt(sum_sq + eps);
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] * inv;
  return out;
}

double situ(double gate, double up, double beta, double beta_lin) {
  return beta * std::tanh(gate / beta) * sigmoid(gate) * (beta_lin * std::tanh(up / beta_lin));
}

std::vector<double> attn_res_mix(const std::vector<std::vector<double>>& sources,
                                 std::span<const double> score, double eps) {
  // Section 2.0: the logit of a source is its RMS-normalised value dotted with the folded
  // res_norm.weight * res_proj.weight[0]; the softmax mixes the raw sources.
  const std::size_t n = sources.size();
  std::vector<double> s(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& v = sources[i];
    double sum_sq = 0;
    for (double x : v) sum_sq += x * x;
    const double inv = 1.0 / std::sqrt(sum_sq / static_cast<double>(v.size()) + eps);
    double acc = 0;
    for (std::size_t d = 0; d < v.size(); ++d) acc += v[d] * inv * score[d];
    s[i] = acc;
  }
  const double top = *std::max_element(s.begin(), s.end());
  double total = 0;
  for (double& x : s) total += (x = std::exp(x - top));
  std::vector<double> out(sources[0].size(), 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    const double alpha = s[i] / total;
    for (std::size_t d = 0; d < out.size(); ++d) out[d] += alpha * sources[i][d];
  }
  return out;
}

std::vector<Route> route_experts(std::span<const double> logits, std::span<const double> bias,
                                 int k, double scaling) {
  const std::size_t n = logits.size();
  if (k < 0 || static_cast<std::size_t>(k) > n || bias.size() != n) {
    throw InternalError("route_experts: top-" + std::to_string(k) + " of " + std::to_string(n) +
                        " experts with " + std::to_string(bias.size()) + " biases");
  }
  std::vector<double> s(n), biased(n);
  for (std::size_t e = 0; e < n; ++e) {
    s[e] = sigmoid(logits[e]);
    biased[e] = s[e] + bias[e];  // noaux_tc: the bias only selects
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  // Ties: the lower expert index wins (a stable, documented choice; torch.topk leaves it open).
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return biased[a] > biased[b]; });
  std::vector<Route> out(static_cast<std::size_t>(k));
  double sum = 0;
  for (int i = 0; i < k; ++i) {
    out[i] = {order[i], s[order[i]]};
    sum += out[i].weight;
  }
  for (auto& r : out) r.weight = r.weight / (sum + 1e-20) * scaling;
  return out;
}

std::vector<double> causal_conv_step(std::span<const double> x, std::span<const double> weight,
                                     std::size_t kernel, std::vector<double>& state) {
  const std::size_t channels = x.size();
  const std::size_t past = kernel - 1;
  std::vector<double> out(channels);
  for (std::size_t c = 0; c < channels; ++c) {
    double* hist = state.data() + c * past;
    const double* w = weight.data() + c * kernel;
    // Taps 0..kernel-2 see the stored inputs oldest first; the last tap sees the current input.
    double acc = w[past] * x[c];
    for (std::size_t i = 0; i < past; ++i) acc += w[i] * hist[i];
    out[c] = acc;
    for (std::size_t i = 0; i + 1 < past; ++i) hist[i] = hist[i + 1];
    if (past > 0) hist[past - 1] = x[c];
  }
  return out;
}

std::vector<double> kda_recurrent(const KdaHeadInputs& in, std::vector<double>& S) {
  const std::size_t K = in.key_dim, V = in.value_dim;
  std::vector<double> o(in.tokens * V);
  std::vector<double> u(V);
  for (std::size_t t = 0; t < in.tokens; ++t) {
    const double* q = &in.q[t * K];
    const double* k = &in.k[t * K];
    const double* g = &in.g[t * K];
    const double* v = &in.v[t * V];
    const double beta = in.beta[t];
    // Section 2.4 step 5, in exactly this order: S = diag(alpha) S (decay the key rows) ...
    for (std::size_t i = 0; i < K; ++i) {
      const double alpha = std::exp(g[i]);
      for (std::size_t j = 0; j < V; ++j) S[i * V + j] *= alpha;
    }
    // ... u = S^T k ...
    std::fill(u.begin(), u.end(), 0.0);
    for (std::size_t i = 0; i < K; ++i)
      for (std::size_t j = 0; j < V; ++j) u[j] += S[i * V + j] * k[i];
    // ... S += k (beta (v - u))^T ...
    for (std::size_t i = 0; i < K; ++i)
      for (std::size_t j = 0; j < V; ++j) S[i * V + j] += k[i] * (beta * (v[j] - u[j]));
    // ... o = S^T q, read after the update.
    for (std::size_t i = 0; i < K; ++i)
      for (std::size_t j = 0; j < V; ++j) o[t * V + j] += S[i * V + j] * q[i];
  }
  return o;
}

std::vector<double> kda_chunked(const KdaHeadInputs& in, std::vector<double>& S,
                                std::size_t chunk) {
  if (chunk == 0) throw InternalError("kda_chunked: chunk size 0");
  const std::size_t K = in.key_dim, V = in.value_dim;
  std::vector<double> o(in.tokens * V, 0.0);
  for (std::size_t start = 0; start < in.tokens; start += chunk) {
    const std::size_t C = std::min(chunk, in.tokens - start);
    auto q = [&](std::size_t i, std::size_t d) { return in.q[(start + i) * K + d]; };
    auto k = [&](std::size_t i, std::size_t d) { return in.k[(start + i) * K + d]; };
    auto v = [&](std::size_t i, std::size_t d) { return in.v[(start + i) * V + d]; };
    auto beta = [&](std::size_t i) { return in.beta[start + i]; };
    // g_c = cumsum(g) inside the chunk.
    std::vector<double> gc(C * K);
    for (std::size_t i = 0; i < C; ++i)
      for (std::size_t d = 0; d < K; ++d)
        gc[i * K + d] = in.g[(start + i) * K + d] + (i > 0 ? gc[(i - 1) * K + d] : 0.0);

    // A[i][j] = -beta_i sum_d k_i[d] exp(gc_i[d] - gc_j[d]) k_j[d] for j < i (strictly lower).
    std::vector<double> A(C * C, 0.0);
    for (std::size_t i = 0; i < C; ++i)
      for (std::size_t j = 0; j < i; ++j) {
        double acc = 0;
        for (std::size_t d = 0; d < K; ++d)
          acc += k(i, d) * std::exp(gc[i * K + d] - gc[j * K + d]) * k(j, d);
        A[i * C + j] = -acc * beta(i);
      }
    // Forward substitution as naive_chunk_kda does it: row i += A[i,:] A[:, :i], giving the
    // strictly lower part of (I + A_kk)^{-1}; then add I and scale column j by beta_j.
    for (std::size_t i = 1; i < C; ++i) {
      std::vector<double> add(i, 0.0);
      for (std::size_t j = 0; j < i; ++j)
        for (std::size_t m = 0; m < C; ++m) add[j] += A[i * C + m] * A[m * C + j];
      for (std::size_t j = 0; j < i; ++j) A[i * C + j] += add[j];
    }
    for (std::size_t i = 0; i < C; ++i) {
      A[i * C + i] += 1.0;
      for (std::size_t j = 0; j < C; ++j) A[i * C + j] *= beta(j);
    }
    // w = A (exp(g_c) * k), u = A v.
    std::vector<double> w(C * K, 0.0), u(C * V, 0.0);
    for (std::size_t i = 0; i < C; ++i)
      for (std::size_t j = 0; j <= i; ++j) {
        const double a = A[i * C + j];
        for (std::size_t d = 0; d < K; ++d) w[i * K + d] += a * std::exp(gc[j * K + d]) * k(j, d);
        for (std::size_t d = 0; d < V; ++d) u[i * V + d] += a * v(j, d);
      }
    // Aqk[i][j] = sum_d q_i[d] exp(gc_i[d] - gc_j[d]) k_j[d] for j <= i (diagonal kept).
    std::vector<double> Aqk(C * C, 0.0);
    for (std::size_t i = 0; i < C; ++i)
      for (std::size_t j = 0; j <= i; ++j) {
        double acc = 0;
        for (std::size_t d = 0; d < K; ++d)
          acc += q(i, d) * std::exp(gc[i * K + d] - gc[j * K + d]) * k(j, d);
        Aqk[i * C + j] = acc;
      }
    // v_new = u - w S.
    std::vector<double> vn(u);
    for (std::size_t i = 0; i < C; ++i)
      for (std::size_t d = 0; d < K; ++d) {
        const double wid = w[i * K + d];
        for (std::size_t e = 0; e < V; ++e) vn[i * V + e] -= wid * S[d * V + e];
      }
    // o = (q * exp(g_c)) S + Aqk v_new.
    for (std::size_t i = 0; i < C; ++i) {
      double* oi = &o[(start + i) * V];
      for (std::size_t d = 0; d < K; ++d) {
        const double qd = q(i, d) * std::exp(gc[i * K + d]);
        for (std::size_t e = 0; e < V; ++e) oi[e] += qd * S[d * V + e];
      }
      for (std::size_t j = 0; j <= i; ++j)
        for (std::size_t e = 0; e < V; ++e) oi[e] += Aqk[i * C + j] * vn[j * V + e];
    }
    // S = S * exp(g_last) + (exp(g_last - g_c) * k)^T v_new.
    const double* glast = &gc[(C - 1) * K];
    for (std::size_t d = 0; d < K; ++d) {
      const double decay = std::exp(glast[d]);
      for (std::size_t e = 0; e < V; ++e) S[d * V + e] *= decay;
    }
    for (std::size_t i = 0; i < C; ++i)
      for (std::size_t d = 0; d < K; ++d) {
        const double kd = std::exp(glast[d] - gc[i * K + d]) * k(i, d);
        for (std::size_t e = 0; e < V; ++e) S[d * V + e] += kd * vn[i * V + e];
      }
  }
  return o;
}

}  // namespace reference

using reference::Matrix;

namespace {

std::vector<double> to_double(const std::vector<float>& f) {
  return std::vector<double>(f.begin(), f.end());
}

// Dense kv_b_proj [H*(nope+v), kv_lora] (section 2.3): row h*(nope+v)+j is k_nope[j] for j<nope
// and v[j-nope] otherwise. GGUF stores it split (K [H, kv_lora, nope], V [H, v, kv_lora]), so the
// K part is transposed back per head.
Matrix kv_b_matrix(const Weight& w, const ModelConfig& c) {
  if (!w.split_kv()) return reference::dequantize_matrix(w.view());
  const std::size_t H = static_cast<std::size_t>(c.num_attention_heads);
  const std::size_t L = static_cast<std::size_t>(c.kv_lora_rank);
  const std::size_t N = static_cast<std::size_t>(c.qk_nope_head_dim);
  const std::size_t Vd = static_cast<std::size_t>(c.v_head_dim);
  const Matrix K = reference::dequantize_matrix(w.k_b->view());   // [H*L, N]
  const Matrix Vm = reference::dequantize_matrix(w.v_b->view());  // [H*Vd, L]
  if (K.rows != H * L || K.cols != N || Vm.rows != H * Vd || Vm.cols != L) {
    throw InternalError(w.name + ": split K/V shapes do not match the config");
  }
  Matrix m;
  m.rows = H * (N + Vd);
  m.cols = L;
  m.values.assign(m.rows * m.cols, 0.0);
  for (std::size_t h = 0; h < H; ++h) {
    for (std::size_t j = 0; j < N; ++j)
      for (std::size_t l = 0; l < L; ++l)
        m.values[(h * (N + Vd) + j) * L + l] = K.values[(h * L + l) * N + j];
    for (std::size_t j = 0; j < Vd; ++j)
      for (std::size_t l = 0; l < L; ++l)
        m.values[(h * (N + Vd) + N + j) * L + l] = Vm.values[(h * Vd + j) * L + l];
  }
  return m;
}

}  // namespace

ReferenceModel::ReferenceModel(const ModelConfig& config, const WeightStore& ws) : config_(config) {
  if (config_.is_draft()) throw InternalError("reference model: drafts are not supported");
  const dist::Layout one_rank = dist::Layout::make(dist::LayoutSpec{});
  const ModelWeights<const Weight*> w = weight_tree(ws, config_, one_rank);
  auto matrix = [](const Weight* x) { return reference::dequantize_matrix(x->view()); };
  auto vec = [](const Weight* x) { return to_double(x->floats()); };
  auto glu = [&](const model::MlpWeights<const Weight*>& x) {
    return MlpBlock{matrix(x.gate_proj), matrix(x.up_proj), matrix(x.down_proj)};
  };
  embed_ = matrix(w.embed_tokens);
  lm_head_ = matrix(w.lm_head);
  // A sliced load (more than one rank) shows in the row-split vocabulary first.
  const auto vocab = static_cast<std::size_t>(config_.vocab_size);
  if (embed_.rows != vocab || lm_head_.rows != vocab) {
    throw InternalError("reference model needs a one-rank load: embedding of " +
                        std::to_string(embed_.rows) + " rows for a vocabulary of " +
                        std::to_string(vocab));
  }
  final_norm_ = vec(w.norm);
  output_res_score_ = vec(*w.output_attn_res_score);
  for (const LayerWeights<const Weight*>& lw : w.layers) {
    Layer& L = layers_.emplace_back();
    L.mla = lw.mla.has_value();
    L.dense = lw.mlp.has_value();
    L.input_norm = vec(lw.input_layernorm);
    L.post_norm = vec(lw.post_attention_layernorm);
    L.attn_res_score = vec(*lw.self_attention_res_score);
    L.mlp_res_score = vec(*lw.mlp_res_score);
    if (lw.mla) {
      const model::MlaWeights<const Weight*>& src = *lw.mla;
      auto& m = L.mla_w;
      m.q_a = matrix(src.q_a_proj);
      m.q_a_norm = vec(src.q_a_layernorm);
      m.q_b = matrix(src.q_b_proj);
      m.kv_a = matrix(src.kv_a_proj_with_mqa);
      m.kv_a_norm = vec(src.kv_a_layernorm);
      m.kv_b = kv_b_matrix(*src.kv_b_proj, config_);
      m.g = matrix(src.g_proj);
      m.o = matrix(src.o_proj);
    } else {
      const model::KdaWeights<const Weight*>& src = *lw.kda;
      auto& k = L.kda_w;
      k.q = matrix(src.q_proj);
      k.k = matrix(src.k_proj);
      k.v = matrix(src.v_proj);
      k.conv_q = vec(src.q_conv1d);
      k.conv_k = vec(src.k_conv1d);
      k.conv_v = vec(src.v_conv1d);
      k.f_a = matrix(src.f_a_proj);
      k.f_b = matrix(src.f_b_proj);
      k.b = matrix(src.b_proj);
      k.decay = vec(src.decay);
      k.dt_bias = vec(src.dt_bias);
      k.o_norm = vec(src.o_norm);
      k.g = matrix(src.g_proj);
      k.o = matrix(src.o_proj);
    }
    if (lw.mlp) {
      L.mlp = glu(*lw.mlp);
      continue;
    }
    const model::MoeWeights<const Weight*>& src = *lw.moe;
    auto& e = L.moe;
    e.router = matrix(src.gate);
    e.bias = vec(src.e_score_correction_bias);
    e.down_proj = matrix(src.routed_expert_down_proj);
    e.norm = vec(src.routed_expert_norm);
    e.up_proj = matrix(src.routed_expert_up_proj);
    const Weight &w1 = *src.w1, &w3 = *src.w3, &w2 = *src.w2;
    if (w1.shape.empty() || w1.shape[0] != config_.num_experts) {
      throw InternalError("reference model needs a one-rank load: " + w1.name +
                          " holds a slice of the experts");
    }
    for (std::size_t x = 0; x < static_cast<std::size_t>(config_.num_experts); ++x) {
      e.w1.push_back(reference::dequantize_matrix(w1.expert(x)));
      e.w3.push_back(reference::dequantize_matrix(w3.expert(x)));
      e.w2.push_back(reference::dequantize_matrix(w2.expert(x)));
    }
    e.has_shared = src.shared_experts.has_value();
    if (e.has_shared) e.shared = glu(*src.shared_experts);
  }
}

ReferenceState ReferenceModel::initial_state() const {
  ReferenceState s;
  s.layers.resize(layers_.size());
  const std::size_t P = static_cast<std::size_t>(config_.kda_projection_size());
  const std::size_t D = static_cast<std::size_t>(config_.kda_head_dim);
  const std::size_t H = static_cast<std::size_t>(config_.kda_num_heads);
  const std::size_t past = static_cast<std::size_t>(config_.kda_conv_kernel - 1);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    if (layers_[l].mla) continue;
    auto& x = s.layers[l];
    x.conv_q.assign(P * past, 0.0);
    x.conv_k.assign(P * past, 0.0);
    x.conv_v.assign(P * past, 0.0);
    x.S.assign(H * D * D, 0.0);
  }
  return s;
}

std::vector<std::vector<double>> ReferenceModel::forward(
    std::span<const std::int32_t> tokens) const {
  ReferenceState s = initial_state();
  return forward(tokens, s);
}

std::vector<std::vector<double>> ReferenceModel::forward(std::span<const std::int32_t> tokens,
                                                         ReferenceState& state,
                                                         const ReferenceOptions& options) const {
  using reference::attn_res_mix;
  using reference::rms_norm;
  const std::size_t T = tokens.size();
  const double eps = config_.rms_norm_eps;  // section 2.1: every decoder-level norm, 1e-5
  const int block = config_.attn_res_block_size;

  // Section 2.0, per token: h is the stream, B the banked block snapshots of this token.
  Rows h(T);
  std::vector<Rows> B(T);
  for (std::size_t t = 0; t < T; ++t) {
    const std::int32_t id = tokens[t];
    if (id < 0 || static_cast<std::size_t>(id) >= embed_.rows) {
      throw InputError("token id " + std::to_string(id) + " outside the vocabulary of " +
                       std::to_string(embed_.rows));
    }
    const auto row = embed_.row(static_cast<std::size_t>(id));
    h[t].assign(row.begin(), row.end());
  }

  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    const bool reset = static_cast<int>(l) % block == 0;
    Rows p(T), xn(T);
    for (std::size_t t = 0; t < T; ++t) {
      p[t] = h[t];
      Rows sources = B[t];
      sources.push_back(p[t]);
      const std::vector<double> x =
          B[t].empty() ? p[t] : attn_res_mix(sources, L.attn_res_score, eps);
      if (reset) B[t].push_back(p[t]);  // bank the RAW layer input (layer 0 banks the embedding)
      xn[t] = rms_norm(x, L.input_norm, eps);
    }
    const Rows a = L.mla ? mla(L, xn, state.layers[l]) : kda(L, xn, state.layers[l], options);
    for (std::size_t t = 0; t < T; ++t) {
      if (reset) {
        p[t] = a[t];  // the residual stream restarts from the attention output
      } else {
        for (std::size_t d = 0; d < p[t].size(); ++d) p[t][d] += a[t][d];
      }
      Rows sources = B[t];  // never empty here: layer 0 banked
      sources.push_back(p[t]);
      const std::vector<double> y = attn_res_mix(sources, L.mlp_res_score, eps);
      const std::vector<double> yn = rms_norm(y, L.post_norm, eps);
      const std::vector<double> m = L.dense ? mlp(L.mlp, yn) : moe(L.moe, yn);
      h[t] = p[t];
      for (std::size_t d = 0; d < h[t].size(); ++d) h[t][d] += m[d];
    }
  }

  Rows logits(T);
  for (std::size_t t = 0; t < T; ++t) {
    Rows sources = B[t];
    sources.push_back(h[t]);
    const std::vector<double> out = attn_res_mix(sources, output_res_score_, eps);
    logits[t] = reference::matvec(lm_head_, rms_norm(out, final_norm_, eps));
  }
  state.position += T;
  return logits;
}

ReferenceModel::Rows ReferenceModel::attention(std::size_t layer, const Rows& normed,
                                               ReferenceState& state,
                                               const ReferenceOptions& options) const {
  const Layer& L = layers_.at(layer);
  return L.mla ? mla(L, normed, state.layers.at(layer))
               : kda(L, normed, state.layers.at(layer), options);
}

std::vector<double> ReferenceModel::feed_forward(std::size_t layer,
                                                 std::span<const double> normed) const {
  const Layer& L = layers_.at(layer);
  return L.dense ? mlp(L.mlp, normed) : moe(L.moe, normed);
}

// Section 2.3, gated NoPE MLA. Each new token is appended to the cache before it attends, so
// position t sees positions 0..t: the causal mask.
ReferenceModel::Rows ReferenceModel::mla(const Layer& L, const Rows& x,
                                         ReferenceState::Layer& s) const {
  using reference::matvec;
  using reference::rms_norm;
  const MlaBlock& w = L.mla_w;
  const std::size_t H = static_cast<std::size_t>(config_.num_attention_heads);
  const std::size_t N = static_cast<std::size_t>(config_.qk_nope_head_dim);
  const std::size_t R = static_cast<std::size_t>(config_.qk_rope_head_dim);
  const std::size_t Vd = static_cast<std::size_t>(config_.v_head_dim);
  const std::size_t KL = static_cast<std::size_t>(config_.kv_lora_rank);
  const double kLowRankEps = 1e-6;  // section 2.1: q_a/kv_a layernorms use the 1e-6 default
  const double scale = 1.0 / std::sqrt(static_cast<double>(N + R));  // q_head_dim^-0.5
  Rows out(x.size());
  for (std::size_t t = 0; t < x.size(); ++t) {
    const std::vector<double> q =
        matvec(w.q_b, rms_norm(matvec(w.q_a, x[t]), w.q_a_norm, kLowRankEps));
    const std::vector<double> c = matvec(w.kv_a, x[t]);
    const std::vector<double> latent =
        rms_norm(std::span<const double>(c).first(KL), w.kv_a_norm, kLowRankEps);
    // k_rot is neither normalised nor rotated; one copy is shared by all heads.
    s.k_rot.emplace_back(c.begin() + static_cast<std::ptrdiff_t>(KL), c.end());
    const std::vector<double> kv = matvec(w.kv_b, latent);
    std::vector<double> k_nope(H * N), v(H * Vd);
    for (std::size_t h = 0; h < H; ++h) {
      for (std::size_t j = 0; j < N; ++j) k_nope[h * N + j] = kv[h * (N + Vd) + j];
      for (std::size_t j = 0; j < Vd; ++j) v[h * Vd + j] = kv[h * (N + Vd) + N + j];
    }
    s.k_nope.push_back(std::move(k_nope));
    s.v.push_back(std::move(v));

    const std::size_t n = s.k_nope.size();  // positions 0..t of the sequence so far
    const std::vector<double> gate = matvec(w.g, x[t]);
    std::vector<double> o(H * Vd, 0.0);
    for (std::size_t h = 0; h < H; ++h) {
      const double* qh = &q[h * (N + R)];
      std::vector<double> score(n);
      for (std::size_t j = 0; j < n; ++j) {
        double acc = 0;
        for (std::size_t d = 0; d < N; ++d) acc += qh[d] * s.k_nope[j][h * N + d];
        for (std::size_t d = 0; d < R; ++d) acc += qh[N + d] * s.k_rot[j][d];
        score[j] = acc * scale;
      }
      const double top = *std::max_element(score.begin(), score.end());
      double total = 0;
      for (double& e : score) total += (e = std::exp(e - top));
      for (std::size_t j = 0; j < n; ++j) {
        const double alpha = score[j] / total;
        for (std::size_t d = 0; d < Vd; ++d) o[h * Vd + d] += alpha * s.v[j][h * Vd + d];
      }
    }
    // Output gate from g_proj of the same normed input, then o_proj.
    for (std::size_t i = 0; i < o.size(); ++i) o[i] *= reference::sigmoid(gate[i]);
    out[t] = matvec(w.o, o);
  }
  return out;
}

// Section 2.4, KDA. Steps 1-4 per token, step 5 per head over the whole call, step 6 per token.
ReferenceModel::Rows ReferenceModel::kda(const Layer& L, const Rows& x, ReferenceState::Layer& s,
                                         const ReferenceOptions& options) const {
  using reference::matvec;
  const KdaBlock& w = L.kda_w;
  const std::size_t T = x.size();
  const std::size_t H = static_cast<std::size_t>(config_.kda_num_heads);
  const std::size_t D = static_cast<std::size_t>(config_.kda_head_dim);
  const std::size_t kernel = static_cast<std::size_t>(config_.kda_conv_kernel);
  const double lower_bound = config_.kda_gate_lower_bound;
  const double kL2Eps = 1e-6;
  const double q_scale = 1.0 / std::sqrt(static_cast<double>(D));

  std::vector<reference::KdaHeadInputs> heads(H);
  for (auto& in : heads) {
    in.tokens = T;
    in.key_dim = in.value_dim = D;
    in.q.resize(T * D);
    in.k.resize(T * D);
    in.v.resize(T * D);
    in.g.resize(T * D);
    in.beta.resize(T);
  }
  Rows out_gate(T);
  for (std::size_t t = 0; t < T; ++t) {
    // 1. q, k, v = SiLU(ShortConv4(W x)), the conv carrying the previous pre-conv inputs.
    std::vector<double> q =
        reference::causal_conv_step(matvec(w.q, x[t]), w.conv_q, kernel, s.conv_q);
    std::vector<double> k =
        reference::causal_conv_step(matvec(w.k, x[t]), w.conv_k, kernel, s.conv_k);
    std::vector<double> v =
        reference::causal_conv_step(matvec(w.v, x[t]), w.conv_v, kernel, s.conv_v);
    for (auto* y : {&q, &k, &v})
      for (double& e : *y) e = reference::silu(e);
    // 3. z = f_b(f_a x) + dt_bias; g = lower_bound * sigmoid(exp(A_log[h]) z) (decay is folded).
    std::vector<double> z = matvec(w.f_b, matvec(w.f_a, x[t]));
    // 4. beta = sigmoid(b_proj x), one per head.
    const std::vector<double> b = matvec(w.b, x[t]);
    out_gate[t] = matvec(w.g, x[t]);
    for (std::size_t h = 0; h < H; ++h) {
      auto& in = heads[h];
      // 2. per-head l2norm; q scaled by D^-0.5.
      const auto qh = reference::l2_norm(std::span<const double>(q).subspan(h * D, D), kL2Eps);
      const auto kh = reference::l2_norm(std::span<const double>(k).subspan(h * D, D), kL2Eps);
      for (std::size_t d = 0; d < D; ++d) {
        const std::size_t c = h * D + d;
        in.q[t * D + d] = qh[d] * q_scale;
        in.k[t * D + d] = kh[d];
        in.v[t * D + d] = v[c];
        in.g[t * D + d] = lower_bound * reference::sigmoid(w.decay[h] * (z[c] + w.dt_bias[c]));
      }
      in.beta[t] = reference::sigmoid(b[h]);
    }
  }
  // 5. The delta rule per head (the state is carried across calls).
  std::vector<std::vector<double>> o(H);
  for (std::size_t h = 0; h < H; ++h) {
    std::vector<double> S(s.S.begin() + static_cast<std::ptrdiff_t>(h * D * D),
                          s.S.begin() + static_cast<std::ptrdiff_t>((h + 1) * D * D));
    o[h] = options.kda_chunk == 0 ? reference::kda_recurrent(heads[h], S)
                                  : reference::kda_chunked(heads[h], S, options.kda_chunk);
    std::copy(S.begin(), S.end(), s.S.begin() + static_cast<std::ptrdiff_t>(h * D * D));
  }
  // 6. o = RMSNorm_head(o; o_norm, 1e-5) * sigmoid(g_proj x): norm first, then gate; o_proj.
  Rows out(T);
  for (std::size_t t = 0; t < T; ++t) {
    std::vector<double> gated(H * D);
    for (std::size_t h = 0; h < H; ++h) {
      const auto n = reference::rms_norm(std::span<const double>(o[h]).subspan(t * D, D), w.o_norm,
                                         config_.rms_norm_eps);
      for (std::size_t d = 0; d < D; ++d)
        gated[h * D + d] = n[d] * reference::sigmoid(out_gate[t][h * D + d]);
    }
    out[t] = matvec(w.o, gated);
  }
  return out;
}

// Section 2.2: SiTU-GLU MLP (dense layer 0 and the shared experts).
std::vector<double> ReferenceModel::mlp(const MlpBlock& w, std::span<const double> x) const {
  const std::vector<double> g = reference::matvec(w.gate, x);
  const std::vector<double> u = reference::matvec(w.up, x);
  std::vector<double> act(g.size());
  for (std::size_t i = 0; i < g.size(); ++i)
    act[i] = reference::situ(g[i], u[i], config_.situ_beta, config_.situ_linear_beta);
  return reference::matvec(w.down, act);
}

// Section 2.5: LatentMoE. Router and shared experts see the full-width input; the experts run
// in the latent and their weighted SUM is normalised before the up projection.
std::vector<double> ReferenceModel::moe(const MoeBlock& w, std::span<const double> x) const {
  using reference::matvec;
  const auto routes = reference::route_experts(
      matvec(w.router, x), w.bias, config_.num_experts_per_token, config_.routed_scaling_factor);
  const std::vector<double> z = matvec(w.down_proj, x);
  std::vector<double> y(z.size(), 0.0);
  for (const auto& r : routes) {
    const auto e = static_cast<std::size_t>(r.expert);
    const std::vector<double> g = matvec(w.w1[e], z);
    const std::vector<double> u = matvec(w.w3[e], z);
    std::vector<double> act(g.size());
    for (std::size_t i = 0; i < g.size(); ++i)
      act[i] = reference::situ(g[i], u[i], config_.situ_beta, config_.situ_linear_beta);
    const std::vector<double> d = matvec(w.w2[e], act);
    for (std::size_t i = 0; i < y.size(); ++i) y[i] += r.weight * d[i];
  }
  std::vector<double> out = matvec(w.up_proj, reference::rms_norm(y, w.norm, config_.rms_norm_eps));
  if (w.has_shared) {
    const std::vector<double> sh = mlp(w.shared, x);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] += sh[i];
  }
  return out;
}

ReferenceModel load_reference_model(const std::filesystem::path& checkpoint) {
  dist::LayoutSpec spec;  // one rank holds every full parameter
  const dist::Layout layout = dist::Layout::make(spec);
  const JobPlan job = plan_job(checkpoint, std::nullopt, layout);
  const LoadResult loaded = load_rank(job, layout, 0);
  return ReferenceModel(job.checkpoint.config(), loaded.weights);
}

}  // namespace k3::model
