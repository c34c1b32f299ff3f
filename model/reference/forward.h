// model::ReferenceModel: the plain, slow, single-rank Kimi-K3 forward pass in double precision.
// It is the oracle the optimized engine is tested against, so it follows the official modeling_kimi_linear.py of moonshotai/Kimi-K3
// line by line (docs/ENGINE.md, "The math, piece by piece") and favours readability over speed:
// every weight is dequantized once into a dense row-major double matrix, there are no threads,
// no kernels and no absorbed or fused forms.
//
// The building blocks are free functions in k3::model::reference so tests can check each one
// against hand-computed values; the KDA recurrence comes in its token form and in fla's
// naive_chunk_kda form (section 2.4), which must agree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/load/weights.h"
#include "quant/types.h"

namespace k3::model {

namespace reference {

// A dense row-major matrix [rows, cols] of doubles: out = W x is the row-by-row dot product.
struct Matrix {
  std::size_t rows = 0, cols = 0;
  std::vector<double> values;
  std::span<const double> row(std::size_t r) const {
    return std::span<const double>(values).subspan(r * cols, cols);
  }
};

// Any stored matrix (any type, ModelSlim included) through quant::dequantize, widened to double.
Matrix dequantize_matrix(const quant::MatrixView& view);
std::vector<double> matvec(const Matrix& w, std::span<const double> x);

double sigmoid(double x);
double silu(double x);

// KimiRMSNorm (section 2.1): weight * x * rsqrt(mean(x^2) + eps).
std::vector<double> rms_norm(std::span<const double> x, std::span<const double> weight, double eps);
// x * rsqrt(sum(x^2) + eps) (section 2.4 step 2; the KDA q/k norm, eps 1e-6).
std::vector<double> l2_norm(std::span<const double> x, double eps);

// SiTU-GLU (section 2.2): beta tanh(g/beta) sigmoid(g) * beta_lin tanh(u/beta_lin); the sigmoid
// takes the uncapped gate.
double situ(double gate, double up, double beta, double beta_lin);

// AttnRes mix (section 2.0, `_apply_attn_res`): one logit per source
// s_i = sum_d V_i[d] rsqrt(mean(V_i^2) + eps) w[d], alpha = softmax(s), result sum_i alpha_i V_i
// over the RAW sources. `sources` is the bank list followed by the current stream.
std::vector<double> attn_res_mix(const std::vector<std::vector<double>>& sources,
                                 std::span<const double> score, double eps);

// LatentMoE router (section 2.5): s = sigmoid(logits); the top `k` of s + bias are chosen (on
// equal biased scores the LOWER expert index wins); weights are the unbiased s of the chosen,
// divided by (sum + 1e-20) and multiplied by `scaling`. In order of decreasing biased score.
struct Route {
  int expert = 0;
  double weight = 0;
};
std::vector<Route> route_experts(std::span<const double> logits, std::span<const double> bias,
                                 int k, double scaling);

// One step of the depthwise causal conv (section 2.4 step 1), without the SiLU.
// weight: [channels, kernel], oldest tap first; state: [channels, kernel-1], the previous
// pre-conv inputs, oldest first (zeros at the start of a sequence). Shifts `x` into the state.
std::vector<double> causal_conv_step(std::span<const double> x, std::span<const double> weight,
                                     std::size_t kernel, std::vector<double>& state);

// One KDA head over T tokens with everything already activated (section 2.4 steps 1-4):
// q l2-normed and scaled by D^-0.5, k l2-normed, g the log-decay (alpha = exp(g)), beta in (0,1).
struct KdaHeadInputs {
  std::size_t tokens = 0, key_dim = 0, value_dim = 0;
  std::vector<double> q, k, g;  // [T][key_dim]
  std::vector<double> v;        // [T][value_dim]
  std::vector<double> beta;     // [T]
};
// The token recurrence (section 2.4 step 5). `state` is S[key][value] row-major, carried in and
// out. Returns o [T][value_dim].
std::vector<double> kda_recurrent(const KdaHeadInputs& in, std::vector<double>& state);
// fla naive_chunk_kda (section 2.4, "Chunked prefill") with chunks of `chunk` tokens; a last
// chunk shorter than `chunk` is processed as it is (equivalent to zero padding).
std::vector<double> kda_chunked(const KdaHeadInputs& in, std::vector<double>& state,
                                std::size_t chunk);

}  // namespace reference

// What a sequence leaves behind for the next token: the MLA cache (section 2.3: per position the
// normed latent's per-head k_nope and v plus the shared raw k_rot), the KDA recurrent state and
// the conv inputs (section 2.4 "Decode state").
struct ReferenceState {
  struct Layer {
    // MLA: per cached position.
    std::vector<std::vector<double>> k_nope, v;  // [pos][heads * nope], [pos][heads * v]
    std::vector<std::vector<double>> k_rot;      // [pos][rope]
    // KDA.
    std::vector<double> conv_q, conv_k, conv_v;  // [P][kernel-1], oldest first
    std::vector<double> S;                       // [heads][D][D]
  };
  std::vector<Layer> layers;
  std::size_t position = 0;  // tokens consumed so far
};

struct ReferenceOptions {
  // 0: the KDA token recurrence; > 0: naive_chunk_kda with this chunk size.
  std::size_t kda_chunk = 0;
};

class ReferenceModel {
 public:
  // From the WeightStore of a ONE-rank load: every Weight must hold its full parameter.
  ReferenceModel(const ModelConfig& config, const WeightStore& weights);

  const ModelConfig& config() const { return config_; }

  ReferenceState initial_state() const;
  // Logits [T][vocab] for every position of a fresh sequence.
  std::vector<std::vector<double>> forward(std::span<const std::int32_t> tokens) const;
  // Continues `state` with `tokens`: logits of each new position. Feeding a sequence one token
  // at a time gives the same logits as one call with all of it.
  std::vector<std::vector<double>> forward(std::span<const std::int32_t> tokens,
                                           ReferenceState& state,
                                           const ReferenceOptions& options = {}) const;

  // One layer's blocks on given (already normed) inputs, for per-block comparisons: the
  // attention of `layer` (MLA or KDA) over `normed` [T][hidden], continuing `state`, and its
  // feed-forward (dense SiTU MLP or LatentMoE) for one position.
  std::vector<std::vector<double>> attention(std::size_t layer,
                                             const std::vector<std::vector<double>>& normed,
                                             ReferenceState& state,
                                             const ReferenceOptions& options = {}) const;
  std::vector<double> feed_forward(std::size_t layer, std::span<const double> normed) const;

  struct MlaBlock {
    reference::Matrix q_a, q_b, kv_a, kv_b, g, o;  // kv_b dense [H*(nope+v), kv_lora]
    std::vector<double> q_a_norm, kv_a_norm;
  };
  struct KdaBlock {
    reference::Matrix q, k, v, f_a, f_b, b, g, o;
    std::vector<double> conv_q, conv_k, conv_v;  // [P][kernel]
    std::vector<double> decay, dt_bias, o_norm;  // [heads], [P], [D]
  };
  struct MlpBlock {  // SiTU-GLU: dense layer 0 and the shared experts
    reference::Matrix gate, up, down;
  };
  struct MoeBlock {
    reference::Matrix router, down_proj, up_proj;
    std::vector<double> bias, norm;
    std::vector<reference::Matrix> w1, w3, w2;  // per expert
    MlpBlock shared;
    bool has_shared = false;
  };
  struct Layer {
    bool mla = false, dense = false;
    std::vector<double> input_norm, post_norm, attn_res_score, mlp_res_score;
    MlaBlock mla_w;
    KdaBlock kda_w;
    MlpBlock mlp;
    MoeBlock moe;
  };

 private:
  using Rows = std::vector<std::vector<double>>;
  Rows mla(const Layer& w, const Rows& x, ReferenceState::Layer& s) const;
  Rows kda(const Layer& w, const Rows& x, ReferenceState::Layer& s,
           const ReferenceOptions& options) const;
  std::vector<double> mlp(const MlpBlock& w, std::span<const double> x) const;
  std::vector<double> moe(const MoeBlock& w, std::span<const double> x) const;

  ModelConfig config_;
  reference::Matrix embed_, lm_head_;
  std::vector<double> final_norm_, output_res_score_;
  std::vector<Layer> layers_;
};

// Opens `checkpoint` (any format), loads a one-rank plan and builds the reference model.
ReferenceModel load_reference_model(const std::filesystem::path& checkpoint);

}  // namespace k3::model
