#include "model/engine/engine.h"

#include <algorithm>
#include <string>

#include <oneapi/tbb/parallel_for.h>

#include "common/error.h"
#include "dist/traffic.h"
#include "model/engine/engine_impl.h"
#include "model/engine/ops.h"
#include "model/checkpoint/file.h"
#include "quant/reference.h"

namespace k3::model::engine {

using namespace detail;

namespace {

// A KDA conv weight [channels][kernel] as KdaLayer keeps it, [kernel][channels].
std::vector<float> taps_by_offset(const std::vector<float>& per_channel, std::size_t kernel) {
  const std::size_t channels = per_channel.size() / kernel;
  std::vector<float> out(per_channel.size());
  for (std::size_t ch = 0; ch < channels; ++ch)
    for (std::size_t j = 0; j < kernel; ++j) out[j * channels + ch] = per_channel[ch * kernel + j];
  return out;
}

// The dense kv_b_proj [heads*(nope+v), kv_lora] of this rank's heads, as the absorbed per-head
// matrices: K_h^T [kv_lora, nope] (fp32, transposed once) and V_h [v, kv_lora] (in place).
void absorb_dense_kv_b(const Weight& w, std::size_t heads, std::size_t N, std::size_t Vd,
                       std::size_t KL, bool exact, MlaLayer& out) {
  const quant::MatrixView view = w.view();
  if (view.rows != heads * (N + Vd) || view.cols != KL) {
    throw InternalError(w.name + ": " + quant::describe(view) + " for " + std::to_string(heads) +
                        " heads of nope " + std::to_string(N) + " + v " + std::to_string(Vd) +
                        " over kv_lora " + std::to_string(KL));
  }
  const Linear whole(view, exact);
  std::vector<float> k_rows(N * KL);
  for (std::size_t h = 0; h < heads; ++h) {
    quant::dequantize(quant::row_slice(view, h * (N + Vd), N), k_rows);
    std::vector<float> kt(KL * N);
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t l = 0; l < KL; ++l) kt[l * N + n] = k_rows[n * KL + l];
    out.k_absorb.emplace_back(std::move(kt), KL, N);
    out.v_up.push_back(whole.rows_slice(h * (N + Vd) + N, Vd));
  }
}

}  // namespace

Linear detail::product_matrix(const quant::MatrixView& view, bool mapped, bool exact, bool repack) {
  if (exact || !repack) return Linear(view, exact);
  Linear out = Linear::repacked(view);
  if (out.is_repacked() && mapped) FileMapping::release(view.data);
  return out;
}

std::vector<float>& detail::zeroed(std::vector<float>& buffer, std::size_t n) {
  constexpr std::size_t kKeptBytes = std::size_t{16} << 20;
  if (far_above_need(buffer.capacity(), n, kKeptBytes)) std::vector<float>().swap(buffer);
  buffer.assign(n, 0.0f);
  return buffer;
}

Linear Engine::Impl::product(const Weight* w) const {
  return product_matrix(w->view(), w->mapped(), opt.exact, opt.repack_weights);
}

ParallelMlp Engine::Impl::glu(const MlpWeights<const Weight*>& w, dist::GroupKind group) const {
  return ParallelMlp(product(w.gate_proj), product(w.up_proj), product(w.down_proj),
                     RowGroup(groups, group), static_cast<float>(c.situ_beta),
                     static_cast<float>(c.situ_linear_beta));
}

RowParallelLinear Engine::Impl::over_attn_tp(const Weight* w) const {
  return RowParallelLinear(product(w), groups.attn_tp());
}

Engine::Impl::Impl(const ModelConfig& config, const WeightStore& ws, const dist::Groups& g,
                   const EngineOptions& o)
    : c(config), opt(o), groups(g), layout(g.layout()) {
  if (c.is_draft()) throw InternalError("engine: a draft model cannot run as the main model");
  if (opt.slots <= 0) throw UsageError("engine: at least one sequence slot is needed");
  hidden = static_cast<std::size_t>(c.hidden_size);
  nope_dim = static_cast<std::size_t>(c.qk_nope_head_dim);
  rope_dim = static_cast<std::size_t>(c.qk_rope_head_dim);
  v_dim = static_cast<std::size_t>(c.v_head_dim);
  kv_lora = static_cast<std::size_t>(c.kv_lora_rank);
  kda_dim = static_cast<std::size_t>(c.kda_head_dim);
  conv_kernel = static_cast<std::size_t>(c.kda_conv_kernel);
  const auto a = static_cast<std::size_t>(layout.attn_tp());
  mla_heads = static_cast<std::size_t>(c.num_attention_heads) / a;
  kda_heads = static_cast<std::size_t>(c.kda_num_heads) / a;
  kda_width = kda_heads * kda_dim;

  const ModelWeights<const Weight*> w = weight_tree(ws, c, layout);
  // Rows are dequantized one at a time, never multiplied: the table stays as stored.
  embedding = VocabParallelEmbedding(Linear(w.embed_tokens->view(), false),
                                     static_cast<std::size_t>(w.embed_tokens->box.begin.at(0)),
                                     groups.attn_tp());
  lm_head =
      VocabParallelLmHead(product(w.lm_head), static_cast<std::size_t>(w.lm_head->box.begin.at(0)),
                          RowGroup(groups, layout.lm_head_group()));
  final_norm = w.norm->floats();
  output_res_score = (*w.output_attn_res_score)->floats();

  for (const LayerWeights<const Weight*>& lw : w.layers) {
    Layer L;
    L.input_norm = lw.input_layernorm->floats();
    L.post_norm = lw.post_attention_layernorm->floats();
    L.attn_res_score = (*lw.self_attention_res_score)->floats();
    L.mlp_res_score = (*lw.mlp_res_score)->floats();
    if (lw.mla) {
      wire_mla(*lw.mla, L.mla.emplace());
    } else {
      wire_kda(*lw.kda, L.kda.emplace());
    }
    if (lw.mlp) {
      L.mlp = glu(*lw.mlp, layout.dense_mlp_group());
    } else {
      wire_moe(*lw.moe, L.moe.emplace());
    }
    layers.push_back(std::move(L));
  }
  slots.resize(static_cast<std::size_t>(opt.slots));
}

void Engine::Impl::wire_mla(const MlaWeights<const Weight*>& src, MlaLayer& m) {
  const bool exact = opt.exact;
  m.q_a = product(src.q_a_proj);
  m.q_a_norm = src.q_a_layernorm->floats();
  m.q_b = product(src.q_b_proj);
  m.kv_a = product(src.kv_a_proj_with_mqa);
  m.kv_a_norm = src.kv_a_layernorm->floats();
  m.g = product(src.g_proj);
  m.o = over_attn_tp(src.o_proj);
  m.cache_index = static_cast<int>(mla_layers++);
  const Weight& kvb = *src.kv_b_proj;
  if (!kvb.split_kv()) {
    absorb_dense_kv_b(kvb, mla_heads, nope_dim, v_dim, kv_lora, exact, m);
    return;
  }
  // Split K [heads*kv_lora, nope] and V [heads*v, kv_lora]: already the absorbed orientation,
  // each in its own quant type (GGUF Q4_0 / Q2_K).
  const Linear k_b(kvb.k_b->view(), exact), v_b(kvb.v_b->view(), exact);
  if (k_b.rows() != mla_heads * kv_lora || k_b.cols() != nope_dim ||
      v_b.rows() != mla_heads * v_dim || v_b.cols() != kv_lora) {
    throw InternalError(kvb.name + ": split K/V shapes do not match " + std::to_string(mla_heads) +
                        " local heads");
  }
  // Each head's slices repacked like every other product (the same bits): at a verify step's 8
  // rows the plain Q4_0 path was 16 us per head, ~1 ms of a round. A slice that stays as it is
  // shares the whole matrix's storage (exact mode's dequantized copy).
  auto head_matrix = [&](const Linear& whole, std::size_t first, std::size_t rows) {
    Linear slice = whole.rows_slice(first, rows);
    if (exact || !opt.repack_weights) return slice;
    Linear packed = Linear::repacked(slice.view());
    return packed.is_repacked() ? packed : slice;
  };
  for (std::size_t h = 0; h < mla_heads; ++h) {
    m.k_absorb.push_back(head_matrix(k_b, h * kv_lora, kv_lora));
    m.v_up.push_back(head_matrix(v_b, h * v_dim, v_dim));
  }
}

void Engine::Impl::wire_kda(const KdaWeights<const Weight*>& src, KdaLayer& k) {
  k.q = product(src.q_proj);
  k.k = product(src.k_proj);
  k.v = product(src.v_proj);
  k.conv_q = taps_by_offset(src.q_conv1d->floats(), conv_kernel);
  k.conv_k = taps_by_offset(src.k_conv1d->floats(), conv_kernel);
  k.conv_v = taps_by_offset(src.v_conv1d->floats(), conv_kernel);
  k.f_a = product(src.f_a_proj);
  k.f_b = product(src.f_b_proj);
  k.b = product(src.b_proj);
  k.decay = src.decay->floats();
  k.dt_bias = src.dt_bias->floats();
  k.o_norm = src.o_norm->floats();
  k.g = product(src.g_proj);
  k.o = over_attn_tp(src.o_proj);
  k.state_index = static_cast<int>(kda_layers++);
}

void Engine::Impl::wire_moe(const MoeWeights<const Weight*>& src, Moe& x) {
  const bool exact = opt.exact;
  x.router = product(src.gate);
  x.bias = src.e_score_correction_bias->floats();
  x.down_proj = product(src.routed_expert_down_proj);
  x.norm = src.routed_expert_norm->floats();
  x.up_proj = product(src.routed_expert_up_proj);
  const Weight &w1 = *src.w1, &w3 = *src.w3, &w2 = *src.w2;
  for (std::size_t i = 0; i < static_cast<std::size_t>(w1.shape.at(0)); ++i) {
    const quant::MatrixView gate = w1.expert(i), up = w3.expert(i);
    x.w13.push_back(Linear::stacked(gate, up, exact, opt.repack_weights));
    if (w1.mapped()) FileMapping::release(gate.data);  // the stack holds a copy
    if (w3.mapped()) FileMapping::release(up.data);
    x.w2.push_back(product_matrix(w2.expert(i), w2.mapped(), exact, opt.repack_weights));
  }
  if (src.shared_experts) x.shared = glu(*src.shared_experts, layout.shared_experts_group());
  if (!experts) {  // every MoE layer holds the same slice of the experts
    experts.emplace(groups, c.num_experts, c.num_experts_per_token,
                    static_cast<std::size_t>(c.routed_expert_hidden_size),
                    static_cast<int>(w1.box.begin.at(0)), x.w13.size());
  }
}

Engine::Engine(const ModelConfig& config, const WeightStore& weights, const dist::Groups& groups,
               const EngineOptions& options)
    : impl_(std::make_unique<Impl>(config, weights, groups, options)) {
  for (int s = 0; s < options.slots; ++s) reset_slot(s);
}

Engine::~Engine() = default;

const ModelConfig& Engine::config() const { return impl_->c; }
const EngineOptions& Engine::options() const { return impl_->opt; }

MemoryBudget Engine::budget(const ModelConfig& c, const dist::Layout& layout,
                            const EngineOptions& o, std::uint64_t weight_bytes) {
  MemoryBudget b;
  const std::uint64_t a = static_cast<std::uint64_t>(layout.attn_tp());
  std::uint64_t mla = 0, kda = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) (c.is_mla_layer(l) ? mla : kda) += 1;
  const std::uint64_t heads = static_cast<std::uint64_t>(c.kda_num_heads) / a;
  const std::uint64_t D = static_cast<std::uint64_t>(c.kda_head_dim);
  b.kda_state_bytes_per_slot =
      kda * (heads * D * D + 3 * heads * D * static_cast<std::uint64_t>(c.kda_conv_kernel - 1)) *
      sizeof(float);
  b.kda_verify_bytes_per_token = kda * (heads * (5 * D + 1) + 3 * heads * D) * sizeof(float);
  b.mla_cache_bytes_per_token =
      mla * static_cast<std::uint64_t>(c.kv_lora_rank + c.qk_rope_head_dim) * sizeof(float);
  b.state_bytes = static_cast<std::uint64_t>(o.slots) *
                  (b.kda_state_bytes_per_slot + b.mla_cache_bytes_per_token * o.context_length);
  b.weight_bytes = weight_bytes;
  return b;
}

void Engine::reset_slot(int slot) {
  Impl& m = *impl_;
  Slot& s = m.slots.at(static_cast<std::size_t>(slot));
  s.position = 0;
  s.mla.assign(m.mla_layers, {});
  s.kda.assign(m.kda_layers, std::vector<float>(m.kda_heads * m.kda_dim * m.kda_dim, 0.0f));
  s.conv.assign(m.kda_layers, std::vector<float>(3 * m.kda_width * (m.conv_kernel - 1), 0.0f));
  s.pending = 0;
  s.kda_pending.assign(m.kda_layers, {});
  s.conv_inputs.assign(m.kda_layers, {});
}

void Engine::copy_slot(int from, int to) {
  Impl& m = *impl_;
  m.slots.at(static_cast<std::size_t>(to)) = m.slots.at(static_cast<std::size_t>(from));
}

const VocabParallelEmbedding& Engine::embedding() const { return impl_->embedding; }
const VocabParallelLmHead& Engine::lm_head() const { return impl_->lm_head; }

std::size_t Engine::position(int slot) const {
  return impl_->slots.at(static_cast<std::size_t>(slot)).position;
}

void Engine::commit(int slot, std::size_t accepted) {
  Impl& m = *impl_;
  Slot& s = m.slots.at(static_cast<std::size_t>(slot));
  if (accepted == 0 || accepted > s.pending) {
    throw InternalError("engine: slot " + std::to_string(slot) + " commits " +
                        std::to_string(accepted) + " of " + std::to_string(s.pending) +
                        " speculative tokens");
  }
  s.position += accepted;
  const std::size_t row = m.kv_lora + m.rope_dim;
  for (auto& cache : s.mla) cache.resize(s.position * row);  // rejected rows go by position
  // The accepted tokens' recurrence replayed on the state, with the verify step's (and a decode
  // step's) arithmetic, so the state is bitwise the one decoding them would have left. Cheaper
  // than a snapshot per verified token: those were written to memory, one per row per layer.
  const std::size_t D = m.kda_dim;
  oneapi::tbb::parallel_for(std::size_t{0}, m.kda_layers * m.kda_heads, [&](std::size_t pair) {
    const std::size_t l = pair / m.kda_heads, h = pair % m.kda_heads;
    KdaHead& head = s.kda_pending[l].at(h);
    head.tokens = accepted;
    kda_recurrent(head, &s.kda[l][h * D * D]);
  });
  for (std::size_t l = 0; l < m.kda_layers; ++l) {
    // The window after `accepted` tokens: the last `past` rows of [window; their inputs].
    const std::size_t P = m.kda_width, past = m.conv_kernel - 1, n = s.pending;
    const std::size_t kept = past > accepted ? past - accepted : 0, taken = past - kept;
    for (std::size_t which = 0; which < 3; ++which) {
      float* w = s.conv[l].data() + which * past * P;
      const float* inputs = s.conv_inputs[l].data() + which * n * P;
      std::copy(w + taken * P, w + past * P, w);
      std::copy_n(inputs + (accepted - taken) * P, taken * P, w + kept * P);
    }
  }
  s.pending = 0;
}

StepResult Engine::step(std::span<const StepSequence> batch) {
  Impl& m = *impl_;
  const std::size_t H = m.hidden;
  std::vector<std::int32_t> ids;
  const BatchRows br = m.batch_rows(batch, ids);
  const std::size_t T = br.total;
  const double eps = m.c.rms_norm_eps;
  const int block = m.c.attn_res_block_size;

  // Section 2.0: h is the stream; banks hold the raw block inputs of this forward pass.
  Rows h, p, x(T * H), xn(T * H), a, y(T * H), f;
  {
    const dist::TrafficScope traffic(dist::Traffic::kEmbedding);
    m.embedding.lookup(ids, H, h);
  }
  std::vector<Rows> banks;
  std::vector<const float*> src;
  auto mix = [&](const Rows& current, std::span<const float> score, Rows& dst) {
    for (std::size_t t = 0; t < T; ++t) {
      src.clear();
      for (const Rows& bank : banks) src.push_back(&bank[t * H]);
      src.push_back(&current[t * H]);
      attn_res_mix(src, H, score, eps, &dst[t * H]);
    }
  };
  // EngineOptions::trace_layers: the rows of kAllLogits sequences, copied after each layer.
  const std::vector<std::size_t> traced =
      m.opt.trace_layers ? Impl::rows_of(batch, br, StepSequence::Output::kAllLogits)
                         : std::vector<std::size_t>{};
  auto trace_rows = [&](const Rows& from, std::vector<float>& to) {
    to.resize(traced.size() * H);
    for (std::size_t r = 0; r < traced.size(); ++r)
      std::copy_n(&from[traced[r] * H], H, &to[r * H]);
  };
  std::vector<StepResult::LayerTrace> trace;
  // EngineOptions::tap_layers: row t's taps sit side by side in taps[t][k * H ...].
  const std::vector<int>& tap_layers = m.opt.tap_layers;
  const std::size_t tap_width = tap_layers.size() * H;
  std::vector<float> taps(tap_layers.empty() ? 0 : T * tap_width);
  auto tap = [&](int layer, const Rows& rows) {
    for (std::size_t k = 0; k < tap_layers.size(); ++k) {
      if (tap_layers[k] != layer) continue;
      for (std::size_t t = 0; t < T; ++t)
        std::copy_n(&rows[t * H], H, &taps[t * tap_width + k * H]);
    }
  };
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    const Layer& L = m.layers[l];
    const bool reset = static_cast<int>(l) % block == 0;
    p = h;
    if (banks.empty()) {
      x = p;
    } else {
      mix(p, L.attn_res_score, x);
    }
    if (m.opt.tap_attn_res) tap(static_cast<int>(l) - 1, x);  // what layer l's norm reads
    if (reset) banks.push_back(p);  // bank the RAW layer input (layer 0 banks the embedding)
    rms_norm(x.data(), T, H, L.input_norm, eps, xn.data());
    {
      const dist::TrafficScope traffic(dist::Traffic::kAttentionTp);
      if (L.mla) {
        m.mla(*L.mla, xn, batch, br, a);
      } else {
        m.kda(*L.kda, xn, batch, br, a);
      }
    }
    if (reset) {
      p = a;  // the residual stream restarts from the attention output
    } else {
      for (std::size_t i = 0; i < T * H; ++i) p[i] += a[i];
    }
    mix(p, L.mlp_res_score, y);
    rms_norm(y.data(), T, H, L.post_norm, eps, y.data());
    if (L.mlp) {
      const dist::TrafficScope traffic(dist::Traffic::kDenseMlpTp);
      L.mlp->apply(y, T, f);
    } else {
      const dist::TrafficScope traffic(dist::Traffic::kExpertAllToAll);
      m.moe(*L.moe, y, T, f);
    }
    h = std::move(p);
    for (std::size_t i = 0; i < T * H; ++i) h[i] += f[i];
    if (!m.opt.tap_attn_res) tap(static_cast<int>(l), h);
    if (!traced.empty()) {
      auto& t = trace.emplace_back();
      trace_rows(a, t.attention);
      trace_rows(f, t.ffn);
      trace_rows(h, t.stream);
    }
  }

  const int last = static_cast<int>(m.layers.size()) - 1;
  if (m.opt.tap_attn_res &&
      std::find(tap_layers.begin(), tap_layers.end(), last) != tap_layers.end()) {
    Rows output_mix(T * H);  // what the final norm reads, for every row
    mix(h, m.output_res_score, output_mix);
    tap(last, output_mix);
  }

  // Only the rows that produce output go through the final mix, norm and LM head.
  std::vector<std::size_t> row_seq, row_pos;
  const Rows out = m.final_rows(h, banks, m.output_rows(batch, br, row_seq, row_pos));
  StepResult result;
  result.layers = std::move(trace);
  result.taps = std::move(taps);
  {
    const dist::TrafficScope traffic(dist::Traffic::kLmHead);
    m.lm_head_outputs(out, batch, row_seq, row_pos, result);
  }
  m.advance_slots(batch);
  return result;
}

BatchRows Engine::Impl::batch_rows(std::span<const StepSequence> batch,
                                   std::vector<std::int32_t>& ids) const {
  BatchRows br;
  for (const auto& s : batch) {
    const Slot& slot = slots.at(static_cast<std::size_t>(s.slot));
    if (slot.pending > 0) {
      throw InternalError("engine: slot " + std::to_string(s.slot) +
                          " steps before its speculative tokens were committed");
    }
    if (slot.position + s.tokens.size() > opt.context_length) {
      throw InternalError("engine: slot " + std::to_string(s.slot) + " would hold " +
                          std::to_string(slot.position + s.tokens.size()) +
                          " tokens, more than the context length " +
                          std::to_string(opt.context_length));
    }
    for (std::int32_t id : s.tokens) {
      if (id < 0 || id >= c.vocab_size) {
        throw InternalError("engine: token id " + std::to_string(id) +
                            " outside the vocabulary of " + std::to_string(c.vocab_size));
      }
    }
    br.offset.push_back(br.total);
    br.count.push_back(s.tokens.size());
    br.total += s.tokens.size();
    ids.insert(ids.end(), s.tokens.begin(), s.tokens.end());
  }
  return br;
}

std::vector<std::size_t> Engine::Impl::rows_of(std::span<const StepSequence> batch,
                                               const BatchRows& br, StepSequence::Output output) {
  std::vector<std::size_t> rows;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].output != output) continue;
    for (std::size_t j = 0; j < br.count[i]; ++j) rows.push_back(br.offset[i] + j);
  }
  return rows;
}

std::vector<std::size_t> Engine::Impl::output_rows(std::span<const StepSequence> batch,
                                                   const BatchRows& br,
                                                   std::vector<std::size_t>& row_seq,
                                                   std::vector<std::size_t>& row_pos) const {
  std::vector<std::size_t> rows;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto& s = batch[i];
    const std::size_t start = slots[static_cast<std::size_t>(s.slot)].position;
    if (s.output == StepSequence::Output::kAllLogits ||
        s.output == StepSequence::Output::kEveryToken) {
      for (std::size_t j = 0; j < br.count[i]; ++j) {
        row_seq.push_back(i);
        row_pos.push_back(start + j);
        rows.push_back(br.offset[i] + j);
      }
    } else if (s.output == StepSequence::Output::kNextToken && br.count[i] > 0) {
      row_seq.push_back(i);
      row_pos.push_back(start + br.count[i] - 1);
      rows.push_back(br.offset[i] + br.count[i] - 1);
    }
  }
  return rows;
}

Rows Engine::Impl::final_rows(const Rows& h, const std::vector<Rows>& banks,
                              const std::vector<std::size_t>& rows) const {
  const std::size_t H = hidden;
  Rows out(rows.size() * H);
  std::vector<const float*> src;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    src.clear();
    for (const Rows& bank : banks) src.push_back(&bank[rows[r] * H]);
    src.push_back(&h[rows[r] * H]);
    attn_res_mix(src, H, output_res_score, c.rms_norm_eps, &out[r * H]);
  }
  rms_norm(out.data(), rows.size(), H, final_norm, c.rms_norm_eps, out.data());
  return out;
}

void Engine::Impl::advance_slots(std::span<const StepSequence> batch) {
  for (const StepSequence& s : batch) {
    Slot& slot = slots[static_cast<std::size_t>(s.slot)];
    if (s.speculative) {
      slot.pending = s.tokens.size();  // the position moves at commit
    } else {
      slot.position += s.tokens.size();
    }
  }
}

}  // namespace k3::model::engine
