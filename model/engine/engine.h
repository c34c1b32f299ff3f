// engine::Engine: the Kimi-K3 forward pass of one rank inside any parallel layout
// (the official modeling_kimi_linear.py of moonshotai/Kimi-K3 for the math, SGLang's DP-attention and expert-parallel groups for the split;
// docs/ENGINE.md).
//
// Every rank calls step() the same number of times with its DP group's batch (identical on all
// ranks of an attention-TP group; possibly empty), and every step runs the same collectives on
// every rank (ARCHITECTURE.md, "One engine step across the ranks"):
//   * MLA / KDA heads split over the attention-TP group, o_proj partial sums allreduced in it;
//   * the dense MLP and the shared experts split their intermediate size over their group
//     (attention-TP or TP); over TP under DP attention the DP groups' rows are gathered first;
//   * routed experts: each attention-TP rank takes a disjoint share of its group's tokens,
//     routes them, and sends each token's latent to every rank holding a slice of a chosen expert
//     (EP owner x MoE-TP) with one all-to-all; the weighted partial outputs come back with a
//     second one, and the shares are allgathered over the attention-TP group;
//   * the LM head is vocabulary-sharded over its group; sampling reduces (value, token id) pairs
//     instead of gathering logits.
// Sequence state (MLA latent cache, KDA recurrent and conv state) lives in numbered slots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dist/groups.h"
#include "model/config.h"
#include "model/load/weights.h"

namespace k3::model::engine {

struct EngineOptions {
  // fp32 activations for every product (weights dequantized once at start): the mode the
  // double-precision reference comparison uses. Off: integer formats take int8 activations.
  bool exact = false;
  // KDA prefill in chunks of this many tokens (fla's chunked form); 0: the token recurrence.
  std::size_t kda_chunk = 64;
  int slots = 8;  // sequences whose state is held at once (incl. prefix snapshots)
  std::size_t context_length = 4096;  // tokens per sequence (prompt + generated)
  // Keep every layer's attention output, FFN output and stream for the rows of kAllLogits
  // sequences (StepResult::layers): locating a numerical difference to one block.
  bool trace_layers = false;
  // Hidden streams a DSpark drafter reads (StepResult::taps), after these 0-based layers:
  // the AttnRes mixture the next layer's input norm (or the final norm) would see when
  // `tap_attn_res`, else the residual stream after the layer.
  std::vector<int> tap_layers;
  bool tap_attn_res = true;
  // Token ids at or above this are never sampled (0: every id of the LM head): the ids the
  // tokenizer has no token for, when a model's vocabulary is padded beyond its tokenizer's (the
  // synthetic wide and full presets: 163840 rows, a 4352-token vocabulary).
  std::size_t sampled_vocabulary = 0;
  // Matrices the engine multiplies in int8 mode are copied once into the 16-row VNNI order
  // where this CPU has kernels for it (Q8_0, Q4_0, Q2_K and Q3_K on AVX-512 VNNI;
  // Linear::repacked): same bits, faster batch-1 GEMV. A copy of mapped checkpoint bytes replaces
  // them in the resident set, but ranks on one node no longer share those pages through the page
  // cache. Off (k3eval --disable-weight-repack): every matrix as stored.
  bool repack_weights = true;
};

// Per-slot and per-rank memory, computed before anything is allocated.
struct MemoryBudget {
  std::uint64_t kda_state_bytes_per_slot = 0;   // recurrent + conv state, this rank's heads
  // What a verify step keeps per fed token until Engine::commit: every KDA head's recurrence
  // inputs (q, k, v, gates, output, beta) and the token's pre-conv inputs.
  std::uint64_t kda_verify_bytes_per_token = 0;
  std::uint64_t mla_cache_bytes_per_token = 0;  // latent + k_rot of every MLA layer
  std::uint64_t state_bytes = 0;                // all slots at full context
  std::uint64_t weight_bytes = 0;
  std::uint64_t total() const { return state_bytes + weight_bytes; }
};

struct Sampling {
  float temperature = 0;   // 0: greedy (argmax; the lowest token id wins a tie)
  std::uint64_t seed = 0;  // temperature > 0: Gumbel-max over (seed, position, token id)
};

struct StepSequence {
  // kNextToken: sample after the last token; kEveryToken: after each token (a verify step).
  enum class Output { kNone, kNextToken, kEveryToken, kAllLogits };
  int slot = 0;
  std::span<const std::int32_t> tokens;  // fed at positions position(slot) ...
  Output output = Output::kNone;
  Sampling sampling;
  // A verify step of speculative decoding: the slot's persistent KDA state is left untouched
  // and each token's recurrence inputs are kept; Engine::commit then keeps how many of the
  // tokens were accepted (replaying them on the KDA state; MLA cache rows past them are dropped
  // by position).
  bool speculative = false;
};

struct StepResult {
  // Per sequence of the batch: the sampled next token, or -1 for Output::kNone.
  std::vector<std::int32_t> next;
  // Output::kEveryToken sequences: the token sampled after each fed token (empty for others).
  std::vector<std::vector<std::int32_t>> every;
  // EngineOptions::tap_layers: [batch rows, taps x hidden] over every fed row in batch order.
  std::vector<float> taps;
  // Output::kAllLogits sequences, in batch order: [tokens, vocab] row-major each.
  std::vector<std::vector<float>> logits;
  // Non-finite logits this rank saw in its vocabulary shard (a broken checkpoint).
  std::uint64_t nonfinite_logits = 0;
  // EngineOptions::trace_layers: per layer, [rows x hidden] row-major over the kAllLogits rows
  // in batch order (the same rows as `logits`).
  struct LayerTrace {
    std::vector<float> attention;  // the attention block's output a (after o_proj)
    std::vector<float> ffn;        // the dense MLP's or the MoE's output
    std::vector<float> stream;     // h after the layer (p + ffn)
  };
  std::vector<LayerTrace> layers;
};

class VocabParallelEmbedding;
class VocabParallelLmHead;

class Engine {
 public:
  // `weights` is this rank's load (plan made for `groups.layout()` and this rank).
  Engine(const ModelConfig& config, const WeightStore& weights, const dist::Groups& groups,
         const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelConfig& config() const;
  const EngineOptions& options() const;
  static MemoryBudget budget(const ModelConfig& config, const dist::Layout& layout,
                             const EngineOptions& options, std::uint64_t weight_bytes);

  // Slots: reset to an empty sequence, copy (prefix caching), how many tokens a slot holds.
  void reset_slot(int slot);
  void copy_slot(int from, int to);
  std::size_t position(int slot) const;
  // After a speculative step on `slot`: keep its first `accepted` tokens (1 ..  tokens fed).
  // The KDA state becomes the snapshot after the last kept token; the position advances by
  // `accepted`, so MLA cache rows past it are dropped.
  void commit(int slot, std::size_t accepted);

  // Collective over the world (see the header comment).
  StepResult step(std::span<const StepSequence> batch);

  // The token embedding and LM head, which a DSpark drafter shares (model/engine/dspark.h).
  const VocabParallelEmbedding& embedding() const;
  const VocabParallelLmHead& lm_head() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace k3::model::engine
