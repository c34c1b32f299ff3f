// The DSpark drafter's forward (the GQA drafter SGLang serves for Kimi-K3, RadixArk/Kimi-K3-DSpark;
// docs/ENGINE.md, "Speculative decoding (DSpark)"), over this rank's heads. Equation numbers
// below follow that drafter's forward in order.
#include "model/engine/dspark.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>

#include <oneapi/tbb/parallel_for.h>

#include "common/error.h"
#include "model/engine/engine_impl.h"
#include "model/engine/linear.h"
#include "model/engine/ops.h"
#include "model/engine/parallel.h"
#include "model/engine/sampling.h"
#include "quant/gemm_f32.h"
#include "quant/reference.h"

namespace k3::model::engine {

namespace {

// RoPE with YaRN (HF's "yarn" rope type, as Qwen3 and DeepSeek compute it): per rotary pair i
// the inverse frequency blends interpolation (divided by the factor) and extrapolation by a
// linear ramp between the correction dimensions of beta_fast and beta_slow, and cos / sin carry
// the attention factor 0.1 ln(factor) + 1. Pairs are (i, i + dim/2) (rotate_half).
class Rope {
 public:
  Rope() = default;
  Rope(const DSparkConfig& c, std::size_t dim) : dim_(dim) {
    const std::size_t half = dim / 2;
    inv_freq_.resize(half);
    const double base = c.rope_theta;
    for (std::size_t i = 0; i < half; ++i) {
      inv_freq_[i] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(dim));
    }
    if (c.rope_factor > 1) {
      const double factor = c.rope_factor;
      const double original = static_cast<double>(c.rope_original_max_position);
      auto correction_dim = [&](double rotations) {
        return static_cast<double>(dim) * std::log(original / (rotations * 2 * M_PI)) /
               (2 * std::log(base));
      };
      double low = std::max(0.0, std::floor(correction_dim(c.rope_beta_fast)));
      double high =
          std::min(static_cast<double>(dim - 1), std::ceil(correction_dim(c.rope_beta_slow)));
      if (low == high) high += 0.001;
      for (std::size_t i = 0; i < half; ++i) {
        const double ramp =
            std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        const double extrapolation = 1.0 - ramp;
        inv_freq_[i] = inv_freq_[i] / factor * (1.0 - extrapolation) + inv_freq_[i] * extrapolation;
      }
      scale_ = 0.1 * std::log(factor) + 1.0;
    }
  }
  // x holds `heads` vectors of dim values for one position.
  void apply(float* x, std::size_t heads, std::size_t position) const {
    const std::size_t half = dim_ / 2;
    for (std::size_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(position) * inv_freq_[i];
      const auto cos = static_cast<float>(std::cos(angle) * scale_);
      const auto sin = static_cast<float>(std::sin(angle) * scale_);
      for (std::size_t h = 0; h < heads; ++h) {
        float* v = x + h * dim_;
        const float a = v[i], b = v[i + half];
        v[i] = a * cos - b * sin;
        v[i + half] = b * cos + a * sin;
      }
    }
  }

 private:
  std::size_t dim_ = 0;
  std::vector<double> inv_freq_;
  double scale_ = 1.0;
};

struct DraftLayer {
  std::vector<float> input_norm, post_norm, q_norm, k_norm;
  Linear q, k, v;
  RowParallelLinear o;  // over attention TP
  ParallelMlp mlp;      // over attention TP
};

// The keys and values of a context's first `size` positions, per layer [position][local kv
// heads][dim], read by every slot that starts with them and written by none: a prefix snapshot's
// context is shared by each request that reuses the prefix instead of copied into it.
struct SharedContext {
  std::vector<std::vector<float>> keys, values;
  std::size_t size = 0;
};

struct DraftSlot {
  // Positions [0, shared size) are read from `shared`; the slot's own keys (k_norm, RoPE) and
  // values follow, per layer [position - shared size][local kv heads][dim].
  std::shared_ptr<const SharedContext> shared;
  std::vector<std::vector<float>> keys, values;
  std::size_t context = 0;  // tokens projected, shared and own
  std::size_t shared_size() const { return shared ? shared->size : 0; }
  // Taps of committed tokens not projected yet [pending][taps x hidden]: projected together
  // before the slot's next draft, or once kMaxPendingRows wait. A request that verifies no
  // drafts for a while (the speculation policy's K = 0) then costs its drafter nothing per
  // token, and the catch-up is one batched product instead of one per step.
  std::vector<float> pending_taps;
  std::size_t pending = 0;
};

// Bounds a slot's pending taps (memory: rows x taps x hidden floats per slot).
constexpr std::size_t kMaxPendingRows = 64;

}  // namespace

struct Drafter::Impl {
  ModelConfig c;
  DSparkConfig d;
  DrafterOptions opt;
  const Engine& target;
  const dist::Groups& groups;
  std::size_t hidden = 0, head_dim = 0, q_heads = 0, kv_heads = 0;  // heads: this rank's
  std::vector<DraftLayer> layers;
  Linear fc, markov_w1, markov_w2;  // markov_w2: this rank's LM-head vocabulary shard
  std::vector<float> hidden_norm, norm;
  Rope rope;
  std::vector<DraftSlot> slots;
  // The Markov bias W2 W1[x] on this rank's vocabulary shard is a function of the token x alone:
  // kept per token (a sequence that repeats itself asks for the same few), up to a byte budget,
  // then forgotten all at once. The products are batch-invariant, so a kept row has the bits a
  // recomputed one would.
  std::unordered_map<std::int32_t, std::vector<float>> markov_bias;
  static constexpr std::size_t kMarkovCacheBytes = std::size_t{64} << 20;

  Impl(const ModelConfig& config, const WeightStore& ws, const Engine& t, const dist::Groups& g,
       const DrafterOptions& o)
      : c(config), d(config.dspark.value()), opt(o), target(t), groups(g) {
    if (opt.block_size < 1) throw UsageError("the DSpark block size must be at least 1");
    const dist::Layout& layout = g.layout();
    const auto a = static_cast<std::size_t>(layout.attn_tp());
    hidden = static_cast<std::size_t>(c.hidden_size);
    head_dim = static_cast<std::size_t>(d.head_dim);
    q_heads = static_cast<std::size_t>(c.num_attention_heads) / a;
    kv_heads = static_cast<std::size_t>(d.num_key_value_heads) / a;
    const bool exact = opt.exact;
    // Without fp32 activations the drafter's float matrices (BF16 in SGLang's checkpoint) are
    // re-encoded once as Q8_0, so its forward runs on the integer kernels like the target's
    // quantized layers; its proposals are verified, so this changes no token, only how fast it
    // drafts (docs/PERFORMANCE.md, "Speculative decoding with the DSpark drafter").
    auto lin = [&](const Weight* w) {
      const quant::MatrixView view = w->view();
      const bool float_type = view.type == quant::Type::kBF16 ||
                              view.type == quant::Type::kF16 || view.type == quant::Type::kF32;
      if (!exact && float_type && view.cols % 32 == 0) {
        const Linear q8 = Linear::requantized(view, quant::Type::kQ8_0);
        return opt.repack_weights ? Linear::repacked(q8.view()) : q8;
      }
      return detail::product_matrix(view, w->mapped(), exact, opt.repack_weights);
    };
    const DSparkWeights<const Weight*> w = dspark_weight_tree(ws, c, layout);
    fc = lin(w.fc);
    hidden_norm = w.hidden_norm->floats();
    norm = w.norm->floats();
    markov_w1 = Linear(w.markov_w1->view(), false);  // looked up row by row, never multiplied
    markov_w2 = lin(w.markov_w2);
    if (static_cast<std::size_t>(w.markov_w2->box.begin.at(0)) != t.lm_head().first_row() ||
        markov_w2.rows() != t.lm_head().shard().rows()) {
      throw InternalError("drafter: the Markov head's vocabulary shard is not the LM head's");
    }
    for (const DSparkLayerWeights<const Weight*>& lw : w.layers) {
      DraftLayer L;
      L.input_norm = lw.input_layernorm->floats();
      L.post_norm = lw.post_attention_layernorm->floats();
      L.q_norm = lw.q_norm->floats();
      L.k_norm = lw.k_norm->floats();
      L.q = lin(lw.q_proj);
      L.k = lin(lw.k_proj);
      L.v = lin(lw.v_proj);
      L.o = RowParallelLinear(lin(lw.o_proj), g.attn_tp());
      L.mlp = ParallelMlp::swiglu(lin(lw.mlp.gate_proj), lin(lw.mlp.up_proj),
                                  lin(lw.mlp.down_proj), RowGroup(g, dist::GroupKind::kAttnTp));
      if (L.q.rows() != q_heads * head_dim || L.k.rows() != kv_heads * head_dim) {
        throw InternalError("drafter: " + lw.q_proj->name + " holds " +
                            std::to_string(L.q.rows()) + " rows for " + std::to_string(q_heads) +
                            " local heads");
      }
      layers.push_back(std::move(L));
    }
    rope = Rope(d, head_dim);
    slots.resize(static_cast<std::size_t>(opt.slots));
    for (int s = 0; s < opt.slots; ++s) reset(s);
  }

  DraftSlot& slot(int s) {
    if (s < 0 || static_cast<std::size_t>(s) >= slots.size())
      throw InternalError("drafter: no slot " + std::to_string(s));
    return slots[static_cast<std::size_t>(s)];
  }

  void reset(int s) {
    DraftSlot& ds = slot(s);
    ds.shared.reset();
    ds.keys.assign(layers.size(), {});
    ds.values.assign(layers.size(), {});
    ds.context = 0;
    ds.pending_taps.clear();
    ds.pending = 0;
  }

  // Slot `to` starts with slot `from`'s context, sharing its projected keys and values.
  void copy(int from, int to) {
    DraftSlot& src = slot(from);
    DraftSlot& dst = slot(to);
    if (&src == &dst) return;
    if (src.context > src.shared_size()) share(src);
    reset(to);
    dst.shared = src.shared;
    dst.context = src.context;
    dst.pending_taps = src.pending_taps;
    dst.pending = src.pending;
  }

  // The slot's whole projected context becomes one shared block (its own keys move into it).
  void share(DraftSlot& ds) const {
    auto block = std::make_shared<SharedContext>();
    block->keys.resize(layers.size());
    block->values.resize(layers.size());
    auto move_into = [](std::vector<float>& to, const std::vector<float>* shared,
                        std::vector<float>& own) {
      if (shared) to = *shared;
      to.insert(to.end(), own.begin(), own.end());
      std::vector<float>().swap(own);
    };
    for (std::size_t l = 0; l < layers.size(); ++l) {
      move_into(block->keys[l], ds.shared ? &ds.shared->keys[l] : nullptr, ds.keys[l]);
      move_into(block->values[l], ds.shared ? &ds.shared->values[l] : nullptr, ds.values[l]);
    }
    block->size = ds.context;
    ds.shared = std::move(block);
  }

  // Keys (k_norm, then RoPE at position(r) for row r) and values of the n rows `in` holds.
  template <class Position>
  void project_kv(const DraftLayer& L, SharedInput& in, std::size_t n, Position position, Rows& k,
                  Rows& v) const {
    const std::size_t width = kv_heads * head_dim;
    k.resize(n * width);
    v.resize(n * width);
    in.apply(L.k, k);
    in.apply(L.v, v);
    for (std::size_t r = 0; r < n; ++r) {
      rms_norm(&k[r * width], kv_heads, head_dim, L.k_norm, c.rms_norm_eps, &k[r * width]);
      rope.apply(&k[r * width], kv_heads, position(r));
    }
  }

  // Committed tokens' taps wait in the slot until its next draft (or kMaxPendingRows of them).
  void extend(int s, std::span<const float> taps, std::size_t n) {
    DraftSlot& ds = slot(s);
    if (taps.size() != n * fc.cols()) {
      throw InternalError("drafter: " + std::to_string(taps.size()) + " tap values for " +
                          std::to_string(n) + " rows of " + std::to_string(fc.cols()));
    }
    if (ds.context + ds.pending + n > opt.context_length) {
      throw InternalError("drafter: slot " + std::to_string(s) + " would hold " +
                          std::to_string(ds.context + ds.pending + n) +
                          " tokens, more than the context length");
    }
    if (n == 0) return;
    if (ds.pending == 0 && n >= kMaxPendingRows) {  // a prompt chunk: no copy
      DraftSlot* owner = &ds;
      project(std::span<DraftSlot* const>(&owner, 1), std::span<const std::size_t>(&n, 1), taps);
      return;
    }
    ds.pending_taps.insert(ds.pending_taps.end(), taps.begin(), taps.end());
    ds.pending += n;
    if (ds.pending < kMaxPendingRows) return;
    // Every slot's waiting rows go with it: slots admitted together fill up together, and one
    // product reads the drafter's matrices once for all of them.
    std::vector<DraftSlot*> waiting;
    for (DraftSlot& other : slots) waiting.push_back(&other);
    flush(waiting);
  }

  // Projects the pending taps of `owners` (those that have any) in one batch.
  void flush(std::span<DraftSlot* const> owners) {
    std::vector<DraftSlot*> waiting;
    for (DraftSlot* ds : owners) {
      if (ds->pending > 0 && std::find(waiting.begin(), waiting.end(), ds) == waiting.end())
        waiting.push_back(ds);
    }
    if (waiting.empty()) return;
    std::vector<std::size_t> rows;
    for (const DraftSlot* ds : waiting) rows.push_back(ds->pending);
    if (waiting.size() == 1) {
      project(waiting, rows, waiting[0]->pending_taps);
    } else {
      std::vector<float> taps;
      for (const DraftSlot* ds : waiting)
        taps.insert(taps.end(), ds->pending_taps.begin(), ds->pending_taps.end());
      project(waiting, rows, taps);
    }
    for (DraftSlot* ds : waiting) {
      ds->pending_taps.clear();
      ds->pending = 0;
    }
  }

  // c_t = hidden_norm(fc [taps]) of n rows, on every rank of the attention-TP group. fc reads
  // every tap and is the projection's largest product, while each rank keeps only its heads'
  // keys: the group shares the rows out (row t to rank t mod size) and gathers the features,
  // instead of each rank repeating the whole product. Rows do not depend on the batch, so the
  // bits are those of one rank projecting them all.
  Rows features(std::span<const float> taps, std::size_t n) const {
    const TokenShares shares(groups.attn_tp(), n);
    const std::size_t width = fc.cols(), m = shares.mine().size();
    Rows mine(m * hidden);
    if (m == n) {
      fc.apply(taps, n, mine);
    } else if (m > 0) {
      Rows rows(m * width);
      for (std::size_t i = 0; i < m; ++i)
        std::copy_n(&taps[shares.mine()[i] * width], width, &rows[i * width]);
      fc.apply(rows, m, mine);
    }
    rms_norm(mine.data(), m, hidden, hidden_norm, c.rms_norm_eps, mine.data());
    return shares.assemble(std::move(mine), hidden);
  }

  // Equation 1: c_t = hidden_norm(fc [taps]); each layer's keys and values of c_t join the
  // context. `taps` holds owner o's owner_rows[o] rows, owner after owner. Rows are projected
  // independently (the kernels' rows do not depend on the batch), so projecting them together
  // or one by one gives the same keys.
  void project(std::span<DraftSlot* const> owners, std::span<const std::size_t> owner_rows,
               std::span<const float> taps) {
    const std::size_t n = taps.size() / fc.cols();
    std::vector<std::size_t> position(n);
    for (std::size_t o = 0, r = 0; o < owners.size(); ++o)
      for (std::size_t j = 0; j < owner_rows[o]; ++j) position[r++] = owners[o]->context + j;
    const Rows feature = features(taps, n);
    Rows k, v;
    SharedInput in(feature, n);  // every layer reads the same features
    const std::size_t width = kv_heads * head_dim;
    for (std::size_t l = 0; l < layers.size(); ++l) {
      project_kv(layers[l], in, n, [&](std::size_t r) { return position[r]; }, k, v);
      for (std::size_t o = 0, r = 0; o < owners.size(); r += owner_rows[o], ++o) {
        const auto from = static_cast<std::ptrdiff_t>(r * width);
        const auto to = static_cast<std::ptrdiff_t>((r + owner_rows[o]) * width);
        owners[o]->keys[l].insert(owners[o]->keys[l].end(), k.begin() + from, k.begin() + to);
        owners[o]->values[l].insert(owners[o]->values[l].end(), v.begin() + from, v.begin() + to);
      }
    }
    for (std::size_t o = 0; o < owners.size(); ++o) owners[o]->context += owner_rows[o];
  }

  // Equation 3's attention for one layer: every block row of a sequence sees the sequence's
  // whole context and every row of its block (non-causal), per local head over its KV group.
  // Per (sequence, KV head): its keys and values gathered, the scores of the group's query rows
  // one F32 product over the keys as lanes, and the weighted values one more (scalar loops over
  // 16-wide heads were ~2 % of a verify round).
  void attend(std::size_t l, std::span<const DraftRequest> batch, std::size_t G, const Rows& q,
              const Rows& kb, const Rows& vb, Rows& out) const {
    const std::size_t D = head_dim, QW = q_heads * D, KW = kv_heads * D;
    const std::size_t group = q_heads / kv_heads;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    out.assign(batch.size() * G * QW, 0.0f);
    oneapi::tbb::parallel_for(std::size_t{0}, batch.size() * kv_heads, [&](std::size_t job) {
      const std::size_t i = job / kv_heads, kvh = job % kv_heads;
      const DraftSlot& ds = slots[static_cast<std::size_t>(batch[i].slot)];
      const std::size_t S = ds.shared_size(), P = ds.context, keys = P + G, rows = group * G;
      // Key j < P is context position j (shared below S, the slot's own from S), then the
      // block's rows: the keys transposed ([D][keys], so that a score row is one product over
      // keys as lanes), the values as they are.
      Rows kt(D * keys), v(keys * D), qs(rows * D), score(rows * keys);
      for (std::size_t j = 0; j < keys; ++j) {
        const float *key = kb.data(), *value = vb.data();
        std::size_t at = i * G + j - P;
        if (j < S) {
          key = ds.shared->keys[l].data(), value = ds.shared->values[l].data(), at = j;
        } else if (j < P) {
          key = ds.keys[l].data(), value = ds.values[l].data(), at = j - S;
        }
        key += at * KW + kvh * D;
        value += at * KW + kvh * D;
        for (std::size_t e = 0; e < D; ++e) {
          kt[e * keys + j] = key[e];
          v[j * D + e] = value[e];
        }
      }
      // Query row (h, r): head kvh * group + h of block row r.
      for (std::size_t h = 0; h < group; ++h)
        for (std::size_t r = 0; r < G; ++r)
          for (std::size_t e = 0; e < D; ++e)
            qs[(h * G + r) * D + e] = q[(i * G + r) * QW + (kvh * group + h) * D + e];
      quant::gemm_f32_nn(rows, keys, D, qs.data(), D, kt.data(), keys, score.data(), keys);
      for (std::size_t r = 0; r < rows; ++r) {
        float* sc = &score[r * keys];
        float top = -std::numeric_limits<float>::infinity();
        for (std::size_t j = 0; j < keys; ++j) top = std::max(top, sc[j] *= scale);
        double sum = 0;
        for (std::size_t j = 0; j < keys; ++j) sum += (sc[j] = std::exp(sc[j] - top));
        const auto inv = static_cast<float>(1.0 / sum);
        for (std::size_t j = 0; j < keys; ++j) sc[j] *= inv;
      }
      for (std::size_t h = 0; h < group; ++h) {
        quant::gemm_f32_nn(G, D, keys, &score[h * G * keys], keys, v.data(), D,
                           &out[i * G * QW + (kvh * group + h) * D], QW);
      }
    });
  }

  std::vector<std::vector<std::int32_t>> propose(std::span<const DraftRequest> batch) {
    const std::size_t G = static_cast<std::size_t>(opt.block_size), H = hidden;
    const std::size_t n = batch.size() * G, D = head_dim;
    const std::size_t QW = q_heads * D;
    // Equation 2: [anchor, mask, ...] embedded by the target at positions p .. p + G - 1.
    std::vector<std::int32_t> ids(n, d.mask_token_id);
    std::vector<DraftSlot*> owners;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      owners.push_back(&slot(batch[i].slot));  // checks the slot
      ids[i * G] = batch[i].anchor;
    }
    flush(owners);  // every drafting slot's whole context projected, in one batch
    Rows h, xn(n * H), q(n * QW), kb, vb, attn, o(n * H), f;
    target.embedding().lookup(ids, H, h);
    // Equation 3: pre-norm layers, h += Attn(norm h); h += SwiGLU(norm h); then the final norm.
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const DraftLayer& L = layers[l];
      rms_norm(h.data(), n, H, L.input_norm, c.rms_norm_eps, xn.data());
      // Row r is block row r % G of sequence r / G, at that sequence's context + r % G.
      auto position = [&](std::size_t r) {
        return slots[static_cast<std::size_t>(batch[r / G].slot)].context + r % G;
      };
      SharedInput in(xn, n);
      in.apply(L.q, q);
      project_kv(L, in, n, position, kb, vb);
      for (std::size_t r = 0; r < n; ++r) {
        float* qr = &q[r * QW];
        rms_norm(qr, q_heads, D, L.q_norm, c.rms_norm_eps, qr);
        rope.apply(qr, q_heads, position(r));
      }
      attend(l, batch, G, q, kb, vb, attn);
      std::fill(o.begin(), o.end(), 0.0f);
      L.o.apply(attn, n, o);
      for (std::size_t e = 0; e < n * H; ++e) h[e] += o[e];
      rms_norm(h.data(), n, H, L.post_norm, c.rms_norm_eps, xn.data());
      L.mlp.apply(xn, n, f);
      for (std::size_t e = 0; e < n * H; ++e) h[e] += f[e];
    }
    rms_norm(h.data(), n, H, norm, c.rms_norm_eps, h.data());
    return markov_chain(batch, h, G);
  }

  // Equations 4-5: U_k = W_lm h_k on this rank's vocabulary shard; row by row, the Markov head
  // adds W2 W1[x_{k-1}] (x_{-1} = the anchor) and the group agrees on the best token x_k.
  std::vector<std::vector<std::int32_t>> markov_chain(std::span<const DraftRequest> batch,
                                                      const Rows& final_rows, std::size_t G) {
    const VocabParallelLmHead& head = target.lm_head();
    const std::size_t H = hidden, n = batch.size() * G;
    // Per sequence: anchor, temperature bits, seed, anchor position; gathered with the rows
    // when the LM head's group spans DP groups.
    constexpr std::size_t kKeys = 4;
    std::vector<std::uint64_t> keys(batch.size() * kKeys);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      keys[i * kKeys] = static_cast<std::uint64_t>(batch[i].anchor);
      keys[i * kKeys + 1] = std::bit_cast<std::uint32_t>(batch[i].sampling.temperature);
      keys[i * kKeys + 2] = batch[i].sampling.seed & ((std::uint64_t{1} << 52) - 1);
      keys[i * kKeys + 3] = slots[static_cast<std::size_t>(batch[i].slot)].context;
    }
    const auto in = head.rows().gather(final_rows, n, H);
    const auto all = head.rows().gather(keys, batch.size(), kKeys);
    const std::size_t S = all.total;  // sequences over the group
    const std::size_t mine = all.mine;
    const std::size_t VL = head.shard().rows(), first = head.first_row();
    const std::size_t R = markov_w1.cols();
    Rows logits(in.total * VL);
    head.shard().apply(in.rows, in.total, logits);

    std::vector<std::int32_t> previous(S);
    for (std::size_t s = 0; s < S; ++s)
      previous[s] = static_cast<std::int32_t>(all.rows[s * kKeys]);
    std::vector<std::vector<std::int32_t>> out(batch.size());
    std::vector<float> best(S);
    std::vector<std::int32_t> best_id(S);
    const std::size_t cache_entries = std::max<std::size_t>(kMarkovCacheBytes / (VL * sizeof(float)), S);
    for (std::size_t k = 0; k < G; ++k) {
      // The bias rows of this step's previous tokens that are not kept yet, in one product.
      std::vector<std::int32_t> missing;
      for (std::size_t s = 0; s < S; ++s) {
        if (!markov_bias.count(previous[s]) &&
            std::find(missing.begin(), missing.end(), previous[s]) == missing.end())
          missing.push_back(previous[s]);
      }
      if (!missing.empty()) {
        if (markov_bias.size() + missing.size() > cache_entries) markov_bias.clear();
        Rows w1(missing.size() * R), bias(missing.size() * VL);
        for (std::size_t m = 0; m < missing.size(); ++m) {
          quant::dequantize_row(markov_w1.view(), static_cast<std::size_t>(missing[m]),
                                std::span<float>(w1).subspan(m * R, R));
        }
        markov_w2.apply(w1, missing.size(), bias);
        for (std::size_t m = 0; m < missing.size(); ++m) {
          markov_bias[missing[m]].assign(bias.begin() + static_cast<std::ptrdiff_t>(m * VL),
                                         bias.begin() + static_cast<std::ptrdiff_t>((m + 1) * VL));
        }
      }
      for (std::size_t s = 0; s < S; ++s) {
        const double temperature =
            std::bit_cast<float>(static_cast<std::uint32_t>(all.rows[s * kKeys + 1]));
        // Row k proposes the token at position p + k + 1, which the target samples after the
        // token at p + k: the same noise, so a sampled draft agrees with a sampled target.
        const ShardChoice choice = best_of_shard(
            std::span<const float>(logits).subspan((s * G + k) * VL, VL),
            markov_bias.at(previous[s]).data(), first, temperature, all.rows[s * kKeys + 2],
            all.rows[s * kKeys + 3] + k);
        best[s] = choice.value;
        best_id[s] = choice.token;
      }
      head.reduce_best(best, best_id);
      for (std::size_t s = 0; s < S; ++s) previous[s] = best_id[s];
      for (std::size_t i = 0; i < batch.size(); ++i) out[i].push_back(best_id[mine + i]);
    }
    return out;
  }
};

DrafterOptions drafter_options(const DSparkConfig& draft, const EngineOptions& target,
                               int block_size) {
  DrafterOptions o;
  o.block_size = block_size > 0 ? block_size : draft.block_size;
  o.exact = target.exact;
  o.repack_weights = target.repack_weights;
  o.slots = target.slots;
  o.context_length = target.context_length;
  return o;
}

void tap_for_drafter(const DSparkConfig& draft, EngineOptions& target) {
  target.tap_layers = draft.target_layer_ids;
  target.tap_attn_res = draft.tap_attn_res;
}

Drafter::Drafter(const ModelConfig& draft, const WeightStore& weights, const Engine& target,
                 const dist::Groups& groups, const DrafterOptions& options)
    : impl_(std::make_unique<Impl>(draft, weights, target, groups, options)) {}

Drafter::~Drafter() = default;

std::uint64_t Drafter::context_bytes_per_token(const ModelConfig& draft,
                                               const dist::Layout& layout) {
  const DSparkConfig& d = draft.dspark.value();
  const auto kv_heads = static_cast<std::uint64_t>(d.num_key_value_heads / layout.attn_tp());
  return static_cast<std::uint64_t>(draft.num_hidden_layers) * 2 * kv_heads *
         static_cast<std::uint64_t>(d.head_dim) * sizeof(float);
}

int Drafter::block_size() const { return impl_->opt.block_size; }
const std::vector<int>& Drafter::tap_layers() const { return impl_->d.target_layer_ids; }
bool Drafter::tap_attn_res() const { return impl_->d.tap_attn_res; }
std::size_t Drafter::tap_width() const { return impl_->fc.cols(); }

void Drafter::reset_slot(int slot) { impl_->reset(slot); }
void Drafter::copy_slot(int from, int to) { impl_->copy(from, to); }
std::size_t Drafter::context(int slot) const {
  const DraftSlot& ds = impl_->slots.at(static_cast<std::size_t>(slot));
  return ds.context + ds.pending;
}
std::vector<float> Drafter::context_keys(int slot, int layer) const {
  const DraftSlot& ds = impl_->slots.at(static_cast<std::size_t>(slot));
  const auto l = static_cast<std::size_t>(layer);
  std::vector<float> keys = ds.shared ? ds.shared->keys.at(l) : std::vector<float>{};
  keys.insert(keys.end(), ds.keys.at(l).begin(), ds.keys.at(l).end());
  return keys;
}
std::size_t Drafter::pending(int slot) const {
  return impl_->slots.at(static_cast<std::size_t>(slot)).pending;
}

void Drafter::extend(int slot, std::span<const float> taps, std::size_t rows) {
  impl_->extend(slot, taps, rows);
}

std::vector<std::vector<std::int32_t>> Drafter::propose(std::span<const DraftRequest> batch) {
  return impl_->propose(batch);
}

}  // namespace k3::model::engine
