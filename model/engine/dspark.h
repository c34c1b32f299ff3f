// engine::Drafter: the DSpark drafter beside a target Engine (speculative decoding as SGLang runs
// it for Kimi-K3, RadixArk/Kimi-K3-DSpark; docs/ENGINE.md, "Speculative decoding (DSpark)").
//
// Per sequence the drafter keeps a context: for every token the target has committed, the
// feature c_t = hidden_norm(fc [taps of the target's streams at t]) projected once into each
// layer's keys (k_norm, RoPE at t) and values. One round drafts `block_size` tokens after the
// anchor (the last token sampled, not yet fed to the target) in one non-causal pass over
// [anchor, mask, ..., mask] at positions p .. p + block_size - 1: every block row attends to the
// whole context and to every block row. The rows' logits come from the target's LM head, and
// the Markov head adds W2 W1[previous token] row by row, so row k proposes the token at
// position p + k + 1 given the one proposed before it.
//
// Distribution: the drafter's heads and MLP are split over attention TP (o_proj and down_proj
// summed over it, like the target's attention), the block rows are embedded by the target's
// vocabulary-parallel embedding, and the logits and the Markov bias are scored on the LM head's
// vocabulary shard, each row's best token agreed over its group. Every rank calls propose() once
// per round, with its DP group's sequences (possibly none), so the collectives stay in lockstep.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dist/groups.h"
#include "model/config.h"
#include "model/engine/engine.h"
#include "model/engine/generator.h"
#include "model/load/weights.h"

namespace k3::model::engine {

struct DrafterOptions {
  int block_size = 7;  // tokens drafted per round
  bool exact = false;  // fp32 activations, as EngineOptions::exact
  bool repack_weights = true;  // as EngineOptions::repack_weights
  int slots = 8;       // one per target slot
  std::size_t context_length = 4096;
};

// The options of a drafter beside a target engine with `target` options: the same activation
// mode, slots and context length, and the draft checkpoint's block size unless `block_size` > 0
// (--speculative-dspark-block-size).
DrafterOptions drafter_options(const DSparkConfig& draft, const EngineOptions& target,
                               int block_size = 0);
// The taps of the target's streams the drafter reads, set on the target engine's options.
void tap_for_drafter(const DSparkConfig& draft, EngineOptions& target);

class Drafter : public DraftSource {
 public:
  // `draft` is the DSpark checkpoint's config (config.dspark set), `weights` this rank's slice
  // of it (planned for `groups.layout()`); `target` supplies the embedding and LM head.
  Drafter(const ModelConfig& draft, const WeightStore& weights, const Engine& target,
          const dist::Groups& groups, const DrafterOptions& options);
  ~Drafter() override;
  Drafter(const Drafter&) = delete;
  Drafter& operator=(const Drafter&) = delete;

  // Bytes of context one committed token costs a slot on a rank of `layout` (every layer's key
  // and value over this rank's KV heads), for the job's memory check.
  static std::uint64_t context_bytes_per_token(const ModelConfig& draft,
                                               const dist::Layout& layout);

  int block_size() const;
  // The target layers whose streams the drafter reads, and which stream (EngineOptions).
  const std::vector<int>& tap_layers() const;
  bool tap_attn_res() const;

  std::size_t tap_width() const override;
  void reset_slot(int slot) override;
  void copy_slot(int from, int to) override;
  std::size_t context(int slot) const;  // committed tokens whose features the slot holds
  std::size_t pending(int slot) const override;
  // The projected context's keys of `layer` [context][local kv heads][dim] (tests).
  std::vector<float> context_keys(int slot, int layer) const;

  // Appends the features of `rows` committed tokens of `slot` from their taps [rows, taps x
  // hidden] (StepResult::taps), projected into the layers' keys and values before the slot's
  // next draft (or once 64 wait in one slot, then every slot's together): a request that drafts
  // nothing for a while costs nothing per token. Local: no collective.
  void extend(int slot, std::span<const float> taps, std::size_t rows) override;

  // Collective over the world: per request, block_size proposed tokens after its anchor.
  std::vector<std::vector<std::int32_t>> propose(std::span<const DraftRequest> batch) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace k3::model::engine
