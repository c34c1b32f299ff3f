// engine::Generator: continuous batching over one Engine, the same on every rank.
//
// Each rank passes its DP group's requests (identical on every rank of an attention-TP group).
// Every step mixes the decode tokens of the running sequences with prefill chunks (at most
// `chunked_prefill_size` prompt tokens per step; each prompt cut at multiples of it, so that
// a sequence computes the same numbers in any batch) for up to `max_running_requests`
// sequences.
// Registered prefixes (the few-shot block shared by every GSM8K prompt) are computed once per
// DP group into their own slots; a request whose prompt starts with one copies its state (MLA
// cache, KDA recurrent and conv state) and prefills only the rest. All ranks step in lockstep:
// a DP group with nothing to do joins each step with an empty batch until an allreduce over the
// world says no group has work left.
// With a drafter (speculative decoding, model/engine/dspark.h) a decoding sequence's step is a
// round: the drafter proposes block_size tokens after the last sampled one, the engine verifies
// anchor + drafts in one speculative forward, the longest prefix of drafts the target agrees
// with is accepted plus the target's own next token (the bonus), the engine commits that many
// tokens and the drafter takes their tapped streams. The tokens are the plain path's: a verify
// row computes exactly what decoding that token would (tests/model/engine).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "dist/groups.h"
#include "model/engine/engine.h"
#include "model/engine/speculation.h"

namespace k3::model::engine {

struct Request {
  std::uint64_t id = 0;
  std::vector<std::int32_t> prompt;
  std::size_t max_new_tokens = 0;
  Sampling sampling;
  std::vector<std::int32_t> stop_tokens;  // end the sequence (not part of its output tokens)
};

struct Completion {
  enum class Finish { kLength, kStopToken, kStopped };
  std::uint64_t id = 0;
  std::vector<std::int32_t> tokens;   // generated, without a final stop token
  std::size_t completion_tokens = 0;  // generated, a final stop token included
  std::size_t prompt_tokens = 0;
  std::size_t cached_prompt_tokens = 0;  // taken from a prefix snapshot instead of computed
  Finish finish = Finish::kLength;
  double admitted_s = 0, first_token_s = 0, finished_s = 0;  // since run() started
};
std::string finish_name(Completion::Finish finish);

struct DraftRequest {
  int slot = 0;
  std::int32_t anchor = 0;  // the last sampled token, at the slot's next position
  Sampling sampling;        // temperature > 0: the target's Gumbel noise at each position
};

// What speculative decoding needs from a drafter: model/engine/dspark.h's Drafter, or a scripted
// one in tests. Its slots mirror the engine's; it reads the engine's taps of committed tokens.
class DraftSource {
 public:
  virtual ~DraftSource() = default;
  // Floats per fed row of StepResult::taps it reads (the engine's tap_layers x hidden).
  virtual std::size_t tap_width() const = 0;
  virtual void reset_slot(int slot) = 0;
  virtual void copy_slot(int from, int to) = 0;
  // `rows` tokens of `slot` were committed; `taps` holds their tapped streams.
  virtual void extend(int slot, std::span<const float> taps, std::size_t rows) = 0;
  // Committed rows of `slot` extended but not yet projected: work its next propose() does first.
  virtual std::size_t pending(int /*slot*/) const { return 0; }
  // Collective over the world: per request, the tokens proposed after its anchor.
  virtual std::vector<std::vector<std::int32_t>> propose(std::span<const DraftRequest> batch) = 0;
};

// Greedy acceptance of one verify step (docs/ENGINE.md, "Speculative decoding (DSpark)", Accept): `drafts` d1..dn were
// fed after the anchor and `verified` holds the target's token after each of the n + 1 fed
// tokens. Returns how many drafts the target accepted (the longest prefix with d_i equal to the
// target's token after the token before it); the target's token after the last accepted one is
// the bonus.
std::size_t accepted_drafts(std::span<const std::int32_t> drafts,
                            std::span<const std::int32_t> verified);

// Prefix snapshots that outlive a run: the prefixes a run computed stay in their slots (slot i
// holds prefixes[i]), and the next run on the same engine that registers the same prefixes
// starts from them instead of computing them again (k3eval's warm-up computes the few-shot
// block its timed run then reuses). Owned by the caller, beside the engine; every run given it
// keeps it true: a run that registers other prefixes, or calibrates speculation on those slots,
// clears it before it writes them.
struct ResidentPrefixes {
  std::vector<std::vector<std::int32_t>> prefixes;
};

struct GeneratorOptions {
  int max_running_requests = 16;
  std::size_t chunked_prefill_size = 512;
  bool prefix_caching = true;
  // Speculative decoding with this DSpark drafter (not owned; its slots mirror the engine's, and
  // the engine must tap the layers it reads): each decoding sequence's step becomes a round of
  // drafting block_size tokens and verifying them in one target forward.
  DraftSource* drafter = nullptr;
  // How many drafts each request verifies per step (not owned; kept across runs, so the cost
  // model calibrated in the warm-up serves the evaluation). Null: every request verifies the
  // whole block. Adaptive: the first run on the engine measures the step times first (a few
  // verify steps of growing size and drafter calls, on free slots).
  Speculation* speculation = nullptr;
  // The batch the adaptive cost model is calibrated for (0: this run's own, its requests up to
  // max_running_requests). A warm-up sets the evaluation's, so that its calibration steps are
  // not spent inside the timed run.
  std::size_t calibration_requests = 0;
  // The prefixes the engine's slots already hold (not owned; null: every run computes its own).
  ResidentPrefixes* resident_prefixes = nullptr;
};

struct GeneratorStats {
  std::size_t steps = 0;
  std::size_t prefill_tokens = 0;    // computed this run on this rank's DP group
  std::size_t cached_tokens = 0;     // reused from prefix snapshots
  std::size_t decode_tokens = 0;     // tokens fed by decode steps
  std::size_t generated_tokens = 0;  // sampled: each request's first at the end of its prefill,
                                     // then one per decode step (a stop token included)
  // Speculative decoding: one verify round per decoding sequence and step, the drafts fed to
  // the target (the block size per round, fewer when the request can use fewer) and how many of
  // them it accepted.
  std::size_t verify_rounds = 0;
  std::size_t drafted_tokens = 0;
  std::size_t accepted_drafts = 0;
  // Which K the decode rows verified (k_rounds[0]: plain decode rows beside a drafter), and the
  // time of the decoding steps against the cost model's estimate for decoding them plainly.
  SpeculationTally speculation;
  double calibration_seconds = 0;  // measuring the speculation cost model at the run's start
  double seconds = 0;
};

class Generator {
 public:
  Generator(Engine& engine, const dist::Groups& groups, const GeneratorOptions& options);

  // A prompt prefix shared by many requests. Call before run(), identically within a DP group.
  void add_prefix(std::vector<std::int32_t> tokens);

  // Throws k3::InputError naming the request for an empty prompt, a token id outside the
  // vocabulary, or prompt + max_new_tokens beyond the engine's context length. Not collective:
  // call it inside dist::Runtime::collectively.
  void validate(std::span<const Request> requests) const;

  // Called on every rank after each generated token (stop tokens excluded); returning false
  // stops the sequence (stop strings checked on decoded text). Must decide identically on the
  // ranks of a DP group, which see identical tokens.
  using TokenFn = std::function<bool(const Request&, std::span<const std::int32_t> generated)>;
  using DoneFn = std::function<void(const Request&, const Completion&)>;
  // After every step, on every rank: requests finished and tokens generated so far by all DP
  // groups together (reduced in the step's lockstep allreduce, so it costs nothing extra).
  struct Progress {
    std::uint64_t finished = 0;
    std::uint64_t generated_tokens = 0;
    std::uint64_t steps = 0;
    // Speculative decoding, all DP groups together (GeneratorStats' fields of the same names).
    std::uint64_t verify_rounds = 0;
    std::uint64_t drafted_tokens = 0;
    std::uint64_t accepted_drafts = 0;
  };
  using ProgressFn = std::function<void(const Progress&)>;

  // Collective over the world. Requests are admitted in the order given.
  GeneratorStats run(std::span<const Request> requests, const TokenFn& on_token,
                     const DoneFn& on_done, const ProgressFn& on_progress = {});

 private:
  Engine& engine_;
  const dist::Groups& groups_;
  GeneratorOptions options_;
  std::vector<std::vector<std::int32_t>> prefixes_;
};

}  // namespace k3::model::engine
