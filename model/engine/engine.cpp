#include "model/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include <mpi.h>
#include <oneapi/tbb/parallel_for.h>

#include "dist/collectives.h"
#include "model/engine/kda.h"
#include "model/engine/linear.h"
#include "model/engine/ops.h"
#include "model/engine/sampling.h"
#include "common/error.h"
#include "quant/gemm_f32.h"
#include "quant/reference.h"

namespace k3::model::engine {

namespace {

using Rows = std::vector<float>;  // row-major [n, width]

// The low-rank layernorms of MLA (q_a, kv_a) keep the 1e-6 default (section 2.1); the KDA q/k
// l2 norm uses 1e-6 as well (section 2.4 step 2).
constexpr double kLowRankEps = 1e-6;
constexpr double kL2Eps = 1e-6;

struct MlaLayer {
  Linear q_a, q_b, kv_a, g, o;
  std::vector<float> q_a_norm, kv_a_norm;
  std::vector<Linear> k_absorb;  // per local head: [kv_lora, nope], q_lat = K_h^T q_nope
  std::vector<Linear> v_up;      // per local head: [v, kv_lora]
  int cache_index = 0;           // which MLA cache of a slot
};

struct KdaLayer {
  Linear q, k, v, f_a, f_b, b, g, o;
  std::vector<float> conv_q, conv_k, conv_v, decay, dt_bias, o_norm;
  int state_index = 0;
};

struct Mlp {  // SiTU-GLU over this rank's slice of the intermediate size
  Linear gate, up, down;
};

struct Moe {
  Linear router, down_proj, up_proj;
  std::vector<float> bias, norm;
  std::vector<Linear> w1, w3, w2;  // local experts
  int expert_begin = 0;
  Mlp shared;
  bool has_shared = false;
};

struct Layer {
  bool mla = false, dense = false;
  std::vector<float> input_norm, post_norm, attn_res_score, mlp_res_score;
  MlaLayer mla_w;
  KdaLayer kda_w;
  Mlp mlp;
  Moe moe;
};

struct Slot {
  std::vector<std::vector<float>> mla;   // per MLA layer: [position][kv_lora + rope]
  std::vector<std::vector<float>> kda;   // per KDA layer: S [local heads][D][D]
  std::vector<std::vector<float>> conv;  // per KDA layer: q, k, v [local channels][kernel-1]
  std::size_t position = 0;
};

// Where a batch's rows come from: sequence i owns rows [offset[i], offset[i] + count[i]).
struct BatchRows {
  std::vector<std::size_t> offset, count;
  std::size_t total = 0;
};

}  // namespace

struct Engine::Impl {
  ModelConfig c;
  EngineOptions opt;
  const dist::Groups& groups;
  const dist::Layout& layout;
  dist::RankCoords me;

  Linear embed, lm_head;
  std::size_t embed_begin = 0, lm_begin = 0;
  std::vector<float> final_norm, output_res_score;
  std::vector<Layer> layers;
  std::size_t mla_layers = 0, kda_layers = 0;

  // Local sizes.
  std::size_t H = 0, mla_heads = 0, kda_heads = 0, N = 0, R = 0, Vd = 0, KL = 0, D = 0, P = 0;
  std::size_t kernel = 4;
  // MoE dispatch: TP-communicator ranks holding a slice of each EP owner's experts.
  std::vector<std::vector<int>> owner_ranks;
  std::size_t experts_per_owner = 0;
  // Rows gathered over TP under DP attention start at this TP rank's contribution.
  int tp_leader = 0;

  std::vector<Slot> slots;

  Impl(const ModelConfig& config, const WeightStore& ws, const dist::Groups& g,
       const EngineOptions& o);

  // --- pieces of one step ---
  void embed_tokens(std::span<const std::int32_t> ids, Rows& h) const;
  void mla(const Layer& L, const Rows& x, std::span<const StepSequence> batch, const BatchRows& br,
           Rows& out);
  void kda(const Layer& L, const Rows& x, std::span<const StepSequence> batch, const BatchRows& br,
           Rows& out);
  void mlp_over(const Mlp& w, dist::GroupKind group, const Rows& x, std::size_t n, Rows& out);
  void moe(const Moe& w, const Rows& x, std::size_t n, Rows& out);
  void lm_head_outputs(const Rows& hidden, std::span<const StepSequence> batch,
                       const std::vector<std::size_t>& row_seq,
                       const std::vector<std::size_t>& row_pos, StepResult& result);

  // Rows of every DP group of this TP group (contributed by each group's first attention-TP
  // rank), with this group's rows at [mine, mine + n).
  struct Gathered {
    Rows rows;
    std::size_t total = 0, mine = 0;
  };
  Gathered gather_over_tp(const Rows& x, std::size_t n, std::size_t width) const;
  bool tp_is_attn_tp() const { return layout.tp() == layout.attn_tp(); }
};

namespace {

std::string layer_prefix(int l) { return "model.layers." + std::to_string(l) + "."; }

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

Engine::Impl::Impl(const ModelConfig& config, const WeightStore& ws, const dist::Groups& g,
                   const EngineOptions& o)
    : c(config), opt(o), groups(g), layout(g.layout()), me(g.layout().coords(g.world().rank())) {
  if (c.is_draft()) throw InternalError("engine: a draft model cannot run as the main model");
  if (opt.slots <= 0) throw UsageError("engine: at least one sequence slot is needed");
  const bool exact = opt.exact;
  auto lin = [&](const std::string& name) { return Linear(ws.get(name).view(), exact); };
  auto vec = [&](const std::string& name) { return ws.get(name).floats(); };

  H = static_cast<std::size_t>(c.hidden_size);
  N = static_cast<std::size_t>(c.qk_nope_head_dim);
  R = static_cast<std::size_t>(c.qk_rope_head_dim);
  Vd = static_cast<std::size_t>(c.v_head_dim);
  KL = static_cast<std::size_t>(c.kv_lora_rank);
  D = static_cast<std::size_t>(c.kda_head_dim);
  kernel = static_cast<std::size_t>(c.kda_conv_kernel);
  const auto a = static_cast<std::size_t>(layout.attn_tp());
  mla_heads = static_cast<std::size_t>(c.num_attention_heads) / a;
  kda_heads = static_cast<std::size_t>(c.kda_num_heads) / a;
  P = kda_heads * D;

  const Weight& e = ws.get("model.embed_tokens.weight");
  embed = Linear(e.view(), false);  // rows are dequantized one at a time, never multiplied
  embed_begin = static_cast<std::size_t>(e.box.begin.at(0));
  const Weight& lm = ws.get("lm_head.weight");
  lm_head = Linear(lm.view(), exact);
  lm_begin = static_cast<std::size_t>(lm.box.begin.at(0));
  final_norm = vec("model.norm.weight");
  output_res_score = vec("model.output_attn_res_score");

  for (int l = 0; l < c.num_hidden_layers; ++l) {
    Layer L;
    const std::string p = layer_prefix(l);
    L.mla = c.is_mla_layer(l);
    L.dense = c.is_dense_layer(l);
    L.input_norm = vec(p + "input_layernorm.weight");
    L.post_norm = vec(p + "post_attention_layernorm.weight");
    L.attn_res_score = vec(p + "self_attention_res_score");
    L.mlp_res_score = vec(p + "mlp_res_score");
    const std::string at = p + "self_attn.";
    if (L.mla) {
      auto& m = L.mla_w;
      m.q_a = lin(at + "q_a_proj.weight");
      m.q_a_norm = vec(at + "q_a_layernorm.weight");
      m.q_b = lin(at + "q_b_proj.weight");
      m.kv_a = lin(at + "kv_a_proj_with_mqa.weight");
      m.kv_a_norm = vec(at + "kv_a_layernorm.weight");
      m.g = lin(at + "g_proj.weight");
      m.o = lin(at + "o_proj.weight");
      const Weight& kvb = ws.get(at + "kv_b_proj.weight");
      if (kvb.split_kv()) {
        // Split K [heads*kv_lora, nope] and V [heads*v, kv_lora]: already the absorbed
        // orientation, each in its own quant type (GGUF Q4_0 / Q2_K).
        const Linear k_b(kvb.k_b->view(), exact), v_b(kvb.v_b->view(), exact);
        if (k_b.rows() != mla_heads * KL || k_b.cols() != N || v_b.rows() != mla_heads * Vd ||
            v_b.cols() != KL) {
          throw InternalError(kvb.name + ": split K/V shapes do not match " +
                              std::to_string(mla_heads) + " local heads");
        }
        for (std::size_t h = 0; h < mla_heads; ++h) {
          m.k_absorb.push_back(k_b.rows_slice(h * KL, KL));
          m.v_up.push_back(v_b.rows_slice(h * Vd, Vd));
        }
      } else {
        absorb_dense_kv_b(kvb, mla_heads, N, Vd, KL, exact, m);
      }
      m.cache_index = static_cast<int>(mla_layers++);
    } else {
      auto& k = L.kda_w;
      k.q = lin(at + "q_proj.weight");
      k.k = lin(at + "k_proj.weight");
      k.v = lin(at + "v_proj.weight");
      k.conv_q = vec(at + "q_conv1d.weight");
      k.conv_k = vec(at + "k_conv1d.weight");
      k.conv_v = vec(at + "v_conv1d.weight");
      k.f_a = lin(at + "f_a_proj.weight");
      k.f_b = lin(at + "f_b_proj.weight");
      k.b = lin(at + "b_proj.weight");
      k.decay = vec(at + "decay");
      k.dt_bias = vec(at + "dt_bias");
      k.o_norm = vec(at + "o_norm.weight");
      k.g = lin(at + "g_proj.weight");
      k.o = lin(at + "o_proj.weight");
      k.state_index = static_cast<int>(kda_layers++);
    }
    if (L.dense) {
      L.mlp = {lin(p + "mlp.gate_proj.weight"), lin(p + "mlp.up_proj.weight"),
               lin(p + "mlp.down_proj.weight")};
    } else {
      const std::string m = p + "block_sparse_moe.";
      auto& x = L.moe;
      x.router = lin(m + "gate.weight");
      x.bias = vec(m + "gate.e_score_correction_bias");
      x.down_proj = lin(m + "routed_expert_down_proj.weight");
      x.norm = vec(m + "routed_expert_norm.weight");
      x.up_proj = lin(m + "routed_expert_up_proj.weight");
      const Weight& w1 = ws.get(m + "experts.w1");
      const Weight& w3 = ws.get(m + "experts.w3");
      const Weight& w2 = ws.get(m + "experts.w2");
      x.expert_begin = static_cast<int>(w1.box.begin.at(0));
      for (std::size_t i = 0; i < static_cast<std::size_t>(w1.shape.at(0)); ++i) {
        x.w1.emplace_back(w1.expert(i), exact);
        x.w3.emplace_back(w3.expert(i), exact);
        x.w2.emplace_back(w2.expert(i), exact);
      }
      x.has_shared = c.num_shared_experts > 0;
      if (x.has_shared) {
        x.shared = {lin(m + "shared_experts.gate_proj.weight"),
                    lin(m + "shared_experts.up_proj.weight"),
                    lin(m + "shared_experts.down_proj.weight")};
      }
    }
    layers.push_back(std::move(L));
  }

  // Dispatch targets: for EP owner o, the TP-communicator ranks of (o, every MoE-TP slice).
  experts_per_owner = static_cast<std::size_t>(c.num_experts / layout.ep());
  owner_ranks.assign(static_cast<std::size_t>(layout.ep()), {});
  const std::vector<int> tp_members = layout.members(dist::GroupKind::kTp, me.rank);
  for (std::size_t i = 0; i < tp_members.size(); ++i) {
    const dist::RankCoords rc = layout.coords(tp_members[i]);
    owner_ranks.at(static_cast<std::size_t>(rc.moe_ep_rank)).push_back(static_cast<int>(i));
  }
  const int leader_world = me.rank - me.attn_tp_rank;
  tp_leader = static_cast<int>(std::find(tp_members.begin(), tp_members.end(), leader_world) -
                               tp_members.begin());
  if (groups.tp().rank() !=
      static_cast<int>(std::find(tp_members.begin(), tp_members.end(), me.rank) -
                       tp_members.begin())) {
    throw InternalError("engine: the TP communicator's rank order differs from the layout's");
  }
  slots.resize(static_cast<std::size_t>(opt.slots));
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
  s.kda.assign(m.kda_layers, std::vector<float>(m.kda_heads * m.D * m.D, 0.0f));
  s.conv.assign(m.kda_layers, std::vector<float>(3 * m.P * (m.kernel - 1), 0.0f));
}

void Engine::copy_slot(int from, int to) {
  Impl& m = *impl_;
  m.slots.at(static_cast<std::size_t>(to)) = m.slots.at(static_cast<std::size_t>(from));
}

std::size_t Engine::position(int slot) const {
  return impl_->slots.at(static_cast<std::size_t>(slot)).position;
}

void Engine::Impl::embed_tokens(std::span<const std::int32_t> ids, Rows& h) const {
  // Vocabulary-parallel over the attention-TP group: each rank fills the rows it holds.
  h.assign(ids.size() * H, 0.0f);
  const std::size_t rows = embed.rows();
  for (std::size_t t = 0; t < ids.size(); ++t) {
    const auto id = static_cast<std::size_t>(ids[t]);
    if (id >= embed_begin && id < embed_begin + rows) {
      quant::dequantize_row(embed.view(), id - embed_begin, std::span<float>(h).subspan(t * H, H));
    }
  }
  if (layout.attn_tp() > 1)
    dist::allreduce_sum_ordered(groups.attn_tp(), std::span<float>(h));
}

Engine::Impl::Gathered Engine::Impl::gather_over_tp(const Rows& x, std::size_t n,
                                                    std::size_t width) const {
  Gathered g;
  if (tp_is_attn_tp()) {
    g.rows = x;
    g.rows.resize(n * width);
    g.total = n;
    return g;
  }
  const std::span<const float> mine =
      me.attn_tp_rank == 0 ? std::span<const float>(x).first(n * width) : std::span<const float>();
  auto all = dist::allgatherv(groups.tp(), mine);
  g.mine = static_cast<std::size_t>(all.displs[static_cast<std::size_t>(tp_leader)]) / width;
  g.total = all.data.size() / width;
  g.rows = std::move(all.data);
  return g;
}

// Section 2.3, gated NoPE MLA in the absorbed form: attention runs over the cached normed
// latent and shared k_rot, per head q_lat = K_h^T q_nope and o_h = V_h (sum_j alpha_j latent_j).
void Engine::Impl::mla(const Layer& L, const Rows& x, std::span<const StepSequence> batch,
                       const BatchRows& br, Rows& out) {
  const MlaLayer& w = L.mla_w;
  const std::size_t T = br.total;
  const std::size_t QL = static_cast<std::size_t>(c.q_lora_rank);
  const std::size_t QH = N + R;
  const std::size_t C = KL + R;  // one cache row
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(N + R)));

  Rows qa(T * QL), q(T * mla_heads * QH), kv(T * C), gate(T * mla_heads * Vd);
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
  Rows q_lat(mla_heads * T * KL);
  oneapi::tbb::parallel_for(std::size_t{0}, mla_heads, [&](std::size_t h) {
    Rows q_nope(T * N);
    for (std::size_t t = 0; t < T; ++t)
      std::copy_n(&q[(t * mla_heads + h) * QH], N, &q_nope[t * N]);
    w.k_absorb[h].apply(q_nope, T, std::span<float>(q_lat).subspan(h * T * KL, T * KL));
  });
  // Attention per sequence over its cache, in blocks of query tokens: the scores of every
  // (token, head) row against every cached position are one F32 product with the cache as the
  // matrix; causality masks the positions after each token.
  constexpr std::size_t kQueryBlock = 64;
  Rows o_lat(mla_heads * T * KL, 0.0f), qfull, scores;
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
        quant::gemm_f32_nn(nq, KL, visible, &scores[h * visible], mla_heads * visible,
                           cache.data(), C, &o_lat[(h * T + br.offset[i] + j0) * KL], KL, seen);
      }
    }
  }
  // o_h = V_h o_lat, gated by sigmoid(g_proj x).
  Rows o(T * mla_heads * Vd);
  sigmoid_rows(gate);
  oneapi::tbb::parallel_for(std::size_t{0}, mla_heads, [&](std::size_t h) {
    Rows v(T * Vd);
    w.v_up[h].apply(std::span<const float>(o_lat).subspan(h * T * KL, T * KL), T, v);
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t d = 0; d < Vd; ++d) {
        const std::size_t at = (t * mla_heads + h) * Vd + d;
        o[at] = v[t * Vd + d] * gate[at];
      }
  });
  out.assign(T * H, 0.0f);
  w.o.apply(o, T, out);
  if (layout.attn_tp() > 1)
    dist::allreduce_sum_ordered(groups.attn_tp(), std::span<float>(out));
}

// Section 2.4, KDA over this rank's heads.
void Engine::Impl::kda(const Layer& L, const Rows& x, std::span<const StepSequence> batch,
                       const BatchRows& br, Rows& out) {
  const KdaLayer& w = L.kda_w;
  const std::size_t T = br.total;
  const std::size_t past = kernel - 1;
  Rows q(T * P), k(T * P), v(T * P), fa(T * D), z(T * P), b(T * kda_heads), gate(T * P);
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
  Rows decay_gate(T * P);
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t ch = 0; ch < P; ++ch)
      decay_gate[t * P + ch] = w.decay[ch / D] * (z[t * P + ch] + w.dt_bias[ch]);
  sigmoid_rows(decay_gate);
  sigmoid_rows(b);
  sigmoid_rows(gate);

  Rows o(T * P);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    Slot& s = slots[static_cast<std::size_t>(batch[i].slot)];
    auto& conv = s.conv[static_cast<std::size_t>(w.state_index)];
    const std::size_t n = br.count[i], off = br.offset[i];
    // 1. Causal depthwise conv (carrying the previous pre-conv inputs) then SiLU, token by token.
    Rows* proj[3] = {&q, &k, &v};
    const std::vector<float>* taps[3] = {&w.conv_q, &w.conv_k, &w.conv_v};
    for (int which = 0; which < 3; ++which) {
      float* hist_all = &conv[static_cast<std::size_t>(which) * P * past];
      for (std::size_t t = off; t < off + n; ++t) {
        float* row = &(*proj[which])[t * P];
        for (std::size_t ch = 0; ch < P; ++ch) {
          float* hist = hist_all + ch * past;
          const float* tw = &(*taps[which])[ch * kernel];
          float acc = tw[past] * row[ch];
          for (std::size_t j = 0; j < past; ++j) acc += tw[j] * hist[j];
          for (std::size_t j = 0; j + 1 < past; ++j) hist[j] = hist[j + 1];
          if (past > 0) hist[past - 1] = row[ch];
          row[ch] = acc;
        }
        silu_rows(std::span<float>(row, P));
      }
    }
  }
  // 2-6 per (sequence, head), in parallel: l2 norms, the decay gate, beta, the delta rule over
  // the sequence's tokens, the per-head RMSNorm and the output gate. Each pair owns its state
  // and its output columns, so the order does not matter.
  const std::size_t pairs = batch.size() * kda_heads;
  oneapi::tbb::parallel_for(std::size_t{0}, pairs, [&](std::size_t pair) {
    const std::size_t i = pair / kda_heads, h = pair % kda_heads;
    Slot& s = slots[static_cast<std::size_t>(batch[i].slot)];
    const std::size_t n = br.count[i], off = br.offset[i];
    KdaHead head;
    head.resize(n, D);
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
    float* S = &s.kda[static_cast<std::size_t>(w.state_index)][h * D * D];
    if (n > 1 && opt.kda_chunk > 0) {
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
  w.o.apply(o, T, out);
  if (layout.attn_tp() > 1)
    dist::allreduce_sum_ordered(groups.attn_tp(), std::span<float>(out));
}

// SiTU-GLU over this rank's intermediate slice, reduced over `group`. Over TP under DP
// attention the rows of every DP group are gathered first (each group brings its own batch).
void Engine::Impl::mlp_over(const Mlp& w, dist::GroupKind group, const Rows& x, std::size_t n,
                            Rows& out) {
  const bool over_tp = group == dist::GroupKind::kTp && !tp_is_attn_tp();
  Gathered in;
  if (over_tp) {
    in = gather_over_tp(x, n, H);
  } else {
    in.rows = x;
    in.total = n;
  }
  const std::size_t I = w.gate.rows();
  Rows g(in.total * I), u(in.total * I), y(in.total * H, 0.0f);
  SharedInput shared(in.rows, in.total);
  shared.apply(w.gate, g);
  shared.apply(w.up, u);
  situ_rows(g, u, static_cast<float>(c.situ_beta), static_cast<float>(c.situ_linear_beta));
  w.down.apply(g, in.total, y);
  const dist::Comm& comm = over_tp ? groups.tp() : groups.get(group);
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

  // Dispatch: one record per (token, destination rank): k expert ids (-1: not for this rank),
  // k weights, then the latent. Expert ids are small integers, exact in a float.
  const std::size_t rec = 2 * ku + LT;
  const dist::Comm& tp = groups.tp();
  const std::size_t nr = static_cast<std::size_t>(tp.size());
  std::vector<std::vector<float>> per_dest(nr);
  std::vector<std::vector<std::size_t>> sent_token(nr);
  for (std::size_t i = 0; i < ns; ++i) {
    std::vector<std::size_t> owners;
    for (std::size_t r = 0; r < ku; ++r) {
      const std::size_t owner =
          static_cast<std::size_t>(routes[i * ku + r].expert) / experts_per_owner;
      if (std::find(owners.begin(), owners.end(), owner) == owners.end()) owners.push_back(owner);
    }
    std::sort(owners.begin(), owners.end());
    for (std::size_t owner : owners) {
      for (int dest : owner_ranks[owner]) {
        auto& buf = per_dest[static_cast<std::size_t>(dest)];
        const std::size_t at = buf.size();
        buf.resize(at + rec, 0.0f);
        for (std::size_t r = 0; r < ku; ++r) {
          const Route& route = routes[i * ku + r];
          const bool here = static_cast<std::size_t>(route.expert) / experts_per_owner == owner;
          buf[at + r] = here ? static_cast<float>(route.expert) : -1.0f;
          buf[at + ku + r] = here ? route.weight : 0.0f;
        }
        std::copy_n(&z[i * LT], LT, &buf[at + 2 * ku]);
        sent_token[static_cast<std::size_t>(dest)].push_back(i);
      }
    }
  }
  std::vector<float> send;
  std::vector<int> counts(nr);
  for (std::size_t d = 0; d < nr; ++d) {
    counts[d] = dist::checked_count(per_dest[d].size(), "MoE dispatch");
    send.insert(send.end(), per_dest[d].begin(), per_dest[d].end());
  }
  const auto recv = dist::alltoallv(tp, std::span<const float>(send), counts);

  // The owner side: group the received (record, weight) pairs by local expert, run each expert
  // once over its rows, and accumulate the weighted outputs per record.
  const std::size_t nrec = recv.data.size() / rec;
  const std::size_t local = w.w1.size();
  std::vector<std::vector<std::pair<std::size_t, float>>> by_expert(local);
  for (std::size_t r = 0; r < nrec; ++r) {
    const float* hdr = &recv.data[r * rec];
    for (std::size_t j = 0; j < ku; ++j) {
      if (hdr[j] < 0) continue;
      const auto e = static_cast<std::size_t>(hdr[j]) - static_cast<std::size_t>(w.expert_begin);
      if (e >= local)
        throw InternalError("MoE dispatch: expert " + std::to_string(hdr[j]) + " is not local");
      by_expert[e].emplace_back(r, hdr[ku + j]);
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
      std::copy_n(&recv.data[rows[i].first * rec + 2 * ku], LT, &zin[i * LT]);
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
    back_counts[s] = recv.counts[s] / static_cast<int>(rec) * static_cast<int>(LT);
  // Each rank gets back one latent row per record it sent: the receive counts are known.
  std::vector<int> returned_counts(nr);
  for (std::size_t s = 0; s < nr; ++s)
    returned_counts[s] = static_cast<int>(sent_token[s].size() * LT);
  const auto returned = dist::alltoallv(tp, std::span<const float>(back), back_counts,
                                        std::move(returned_counts));

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

void Engine::Impl::lm_head_outputs(const Rows& hidden, std::span<const StepSequence> batch,
                                   const std::vector<std::size_t>& row_seq,
                                   const std::vector<std::size_t>& row_pos, StepResult& result) {
  const dist::GroupKind group = layout.lm_head_group();
  const bool over_tp = group == dist::GroupKind::kTp && !tp_is_attn_tp();
  const dist::Comm& comm = over_tp ? groups.tp() : groups.get(group);
  const std::size_t n = row_seq.size();

  // Per row: temperature, seed, position, and whether its sequence wants full logits; gathered
  // with the rows, so every rank of the LM-head group knows them without another collective.
  constexpr std::size_t kKeys = 4;
  std::vector<double> keys(n * kKeys);
  for (std::size_t r = 0; r < n; ++r) {
    const Sampling& s = batch[row_seq[r]].sampling;
    keys[r * kKeys] = s.temperature;
    keys[r * kKeys + 1] = static_cast<double>(s.seed & ((1ull << 52) - 1));
    keys[r * kKeys + 2] = static_cast<double>(row_pos[r]);
    keys[r * kKeys + 3] =
        batch[row_seq[r]].output == StepSequence::Output::kAllLogits ? 1.0 : 0.0;
  }
  Gathered in;
  std::vector<double> all_keys;
  if (over_tp) {
    in = gather_over_tp(hidden, n, H);
    const std::span<const double> mine =
        me.attn_tp_rank == 0 ? std::span<const double>(keys) : std::span<const double>();
    all_keys = dist::allgatherv(groups.tp(), mine).data;
  } else {
    in.rows = hidden;
    in.total = n;
    all_keys = keys;
  }
  const std::size_t VL = lm_head.rows();
  const std::size_t V = static_cast<std::size_t>(c.vocab_size);
  Rows logits(in.total * VL);
  lm_head.apply(in.rows, in.total, logits);

  std::vector<float> best(in.total);
  std::vector<std::int32_t> best_id(in.total);
  for (std::size_t r = 0; r < in.total; ++r) {
    const double temperature = all_keys[r * kKeys];
    const auto seed = static_cast<std::uint64_t>(all_keys[r * kKeys + 1]);
    const auto pos = static_cast<std::uint64_t>(all_keys[r * kKeys + 2]);
    const float* row = &logits[r * VL];
    float top = -std::numeric_limits<float>::infinity();
    std::int32_t arg = static_cast<std::int32_t>(lm_begin);
    for (std::size_t i = 0; i < VL; ++i) {
      float value = row[i];
      if (!std::isfinite(value)) {
        if (r >= in.mine && r < in.mine + n) ++result.nonfinite_logits;
        continue;
      }
      if (temperature > 0) {
        value =
            static_cast<float>(value / temperature +
                               gumbel_noise(seed, pos, static_cast<std::uint64_t>(lm_begin + i)));
      }
      if (value > top) {
        top = value;
        arg = static_cast<std::int32_t>(lm_begin + i);
      }
    }
    best[r] = top;
    best_id[r] = arg;
  }
  if (comm.size() > 1)
    dist::allreduce_maxloc(comm, std::span<float>(best), std::span<std::int32_t>(best_id));

  result.next.assign(batch.size(), -1);
  for (std::size_t r = 0; r < n; ++r) result.next[row_seq[r]] = best_id[in.mine + r];

  // Full logits for the debug surface: every shard's columns, reassembled.
  // Every member of the group holds the same keys (one batch, or the gathered rows).
  bool gather_logits = false;
  for (std::size_t r = 0; r < in.total; ++r)
    gather_logits = gather_logits || all_keys[r * kKeys + 3] > 0;
  if (!gather_logits) return;
  Rows full;
  if (comm.size() > 1) {
    const auto shards = dist::allgatherv(comm, std::span<const float>(logits));
    full.assign(in.total * V, 0.0f);
    for (std::size_t m = 0; m < static_cast<std::size_t>(comm.size()); ++m) {
      const std::size_t cols =
          static_cast<std::size_t>(shards.counts[m]) / std::max<std::size_t>(in.total, 1);
      const std::size_t begin = cols * m;  // equal vocabulary shards in rank order
      for (std::size_t r = 0; r < in.total; ++r)
        std::copy_n(&shards.data[static_cast<std::size_t>(shards.displs[m]) + r * cols], cols,
                    &full[r * V + begin]);
    }
  } else {
    full = std::move(logits);
  }
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].output != StepSequence::Output::kAllLogits) continue;
    std::vector<float> rows;
    for (std::size_t r = 0; r < n; ++r) {
      if (row_seq[r] != i) continue;
      rows.insert(rows.end(), full.begin() + static_cast<std::ptrdiff_t>((in.mine + r) * V),
                  full.begin() + static_cast<std::ptrdiff_t>((in.mine + r + 1) * V));
    }
    result.logits.push_back(std::move(rows));
  }
}

StepResult Engine::step(std::span<const StepSequence> batch) {
  Impl& m = *impl_;
  const std::size_t H = m.H;
  BatchRows br;
  std::vector<std::int32_t> ids;
  for (const auto& s : batch) {
    Slot& slot = m.slots.at(static_cast<std::size_t>(s.slot));
    if (slot.position + s.tokens.size() > m.opt.context_length) {
      throw InternalError("engine: slot " + std::to_string(s.slot) + " would hold " +
                          std::to_string(slot.position + s.tokens.size()) +
                          " tokens, more than the context length " +
                          std::to_string(m.opt.context_length));
    }
    for (std::int32_t id : s.tokens) {
      if (id < 0 || id >= m.c.vocab_size) {
        throw InternalError("engine: token id " + std::to_string(id) +
                            " outside the vocabulary of " + std::to_string(m.c.vocab_size));
      }
    }
    br.offset.push_back(br.total);
    br.count.push_back(s.tokens.size());
    br.total += s.tokens.size();
    ids.insert(ids.end(), s.tokens.begin(), s.tokens.end());
  }
  const std::size_t T = br.total;
  const double eps = m.c.rms_norm_eps;
  const int block = m.c.attn_res_block_size;

  // Section 2.0: h is the stream; banks hold the raw block inputs of this forward pass.
  Rows h, p, x(T * H), xn(T * H), a, y(T * H), f;
  m.embed_tokens(ids, h);
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
  std::vector<std::size_t> traced;
  if (m.opt.trace_layers) {
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].output != StepSequence::Output::kAllLogits) continue;
      for (std::size_t j = 0; j < br.count[i]; ++j) traced.push_back(br.offset[i] + j);
    }
  }
  auto trace_rows = [&](const Rows& from, std::vector<float>& to) {
    to.resize(traced.size() * H);
    for (std::size_t r = 0; r < traced.size(); ++r)
      std::copy_n(&from[traced[r] * H], H, &to[r * H]);
  };
  std::vector<StepResult::LayerTrace> trace;
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    const Layer& L = m.layers[l];
    const bool reset = static_cast<int>(l) % block == 0;
    p = h;
    if (banks.empty()) {
      x = p;
    } else {
      mix(p, L.attn_res_score, x);
    }
    if (reset) banks.push_back(p);  // bank the RAW layer input (layer 0 banks the embedding)
    rms_norm(x.data(), T, H, L.input_norm, eps, xn.data());
    if (L.mla) {
      m.mla(L, xn, batch, br, a);
    } else {
      m.kda(L, xn, batch, br, a);
    }
    if (reset) {
      p = a;  // the residual stream restarts from the attention output
    } else {
      for (std::size_t i = 0; i < T * H; ++i) p[i] += a[i];
    }
    mix(p, L.mlp_res_score, y);
    rms_norm(y.data(), T, H, L.post_norm, eps, y.data());
    if (L.dense) {
      m.mlp_over(L.mlp, m.layout.dense_mlp_group(), y, T, f);
    } else {
      m.moe(L.moe, y, T, f);
    }
    h = std::move(p);
    for (std::size_t i = 0; i < T * H; ++i) h[i] += f[i];
    if (!traced.empty()) {
      auto& t = trace.emplace_back();
      trace_rows(a, t.attention);
      trace_rows(f, t.ffn);
      trace_rows(h, t.stream);
    }
  }

  // Only the rows that produce output go through the final mix, norm and LM head.
  std::vector<std::size_t> row_seq, row_pos, rows;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto& s = batch[i];
    const std::size_t start = m.slots[static_cast<std::size_t>(s.slot)].position;
    if (s.output == StepSequence::Output::kAllLogits) {
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
  Rows out(rows.size() * H);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    src.clear();
    for (const Rows& bank : banks) src.push_back(&bank[rows[r] * H]);
    src.push_back(&h[rows[r] * H]);
    attn_res_mix(src, H, m.output_res_score, eps, &out[r * H]);
  }
  rms_norm(out.data(), rows.size(), H, m.final_norm, eps, out.data());
  StepResult result;
  result.layers = std::move(trace);
  m.lm_head_outputs(out, batch, row_seq, row_pos, result);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    m.slots[static_cast<std::size_t>(batch[i].slot)].position += batch[i].tokens.size();
  }
  return result;
}

}  // namespace k3::model::engine
