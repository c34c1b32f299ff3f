#include "model/engine/generator.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <optional>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "dist/collectives.h"
#include "dist/traffic.h"
#include "dist/watchdog.h"

namespace k3::model::engine {

std::size_t accepted_drafts(std::span<const std::int32_t> drafts,
                            std::span<const std::int32_t> verified) {
  std::size_t n = 0;
  while (n < drafts.size() && n < verified.size() && drafts[n] == verified[n]) ++n;
  return n;
}

std::string finish_name(Completion::Finish finish) {
  switch (finish) {
    case Completion::Finish::kLength:
      return "length";
    case Completion::Finish::kStopToken:
      return "stop_token";
    case Completion::Finish::kStopped:
      return "stop_string";
  }
  return "?";
}

Generator::Generator(Engine& engine, const dist::Groups& groups, const GeneratorOptions& options)
    : engine_(engine), groups_(groups), options_(options) {
  if (options_.max_running_requests <= 0) {
    throw UsageError("--max-running-requests must be at least 1");
  }
  if (options_.chunked_prefill_size == 0)
    throw UsageError("--chunked-prefill-size must be at least 1");
}

void Generator::add_prefix(std::vector<std::int32_t> tokens) {
  if (!options_.prefix_caching || tokens.empty()) return;
  prefixes_.push_back(std::move(tokens));
  const int needed = static_cast<int>(prefixes_.size()) + options_.max_running_requests;
  if (needed > engine_.options().slots) {
    throw UsageError(std::to_string(prefixes_.size()) + " prefix snapshot(s) and " +
                     std::to_string(options_.max_running_requests) + " running requests need " +
                     std::to_string(needed) + " state slots, but --max-mamba-cache-size allows " +
                     std::to_string(engine_.options().slots));
  }
}

void Generator::validate(std::span<const Request> requests) const {
  const ModelConfig& c = engine_.config();
  const std::size_t context = engine_.options().context_length;
  for (const Request& r : requests) {
    const std::string who = "request " + std::to_string(r.id) + ": ";
    if (r.prompt.empty()) throw InputError(who + "empty prompt");
    if (r.max_new_tokens == 0) throw InputError(who + "max_new_tokens must be at least 1");
    for (std::int32_t id : r.prompt) {
      if (id < 0 || id >= c.vocab_size) {
        throw InputError(who + "token id " + std::to_string(id) + " outside the vocabulary of " +
                         std::to_string(c.vocab_size));
      }
    }
    if (r.prompt.size() + r.max_new_tokens > context) {
      throw InputError(who + std::to_string(r.prompt.size()) + " prompt tokens + " +
                       std::to_string(r.max_new_tokens) + " new tokens exceed the context length " +
                       std::to_string(context) + " (--context-length)");
    }
  }
}

namespace {

using Clock = std::chrono::steady_clock;

struct Sequence {
  const Request* request = nullptr;  // null for a prefix snapshot
  const std::vector<std::int32_t>* prompt = nullptr;
  int slot = 0;
  std::size_t fed = 0;  // prompt tokens in the slot's state
  bool decoding = false;
  std::vector<std::int32_t> generated;
  std::vector<std::int32_t> block;  // a speculative round: the anchor, then the drafts fed
  int k = 0;                        // drafts this step verifies (0: a plain decode row)
  // No drafter context (dropped at a load where no draft could pay, Speculation::could_pay):
  // decodes plainly to its end, and its rows are never projected.
  bool without_context = false;
  // Proposals whose positions are not all decided yet: every draft the drafter made, compared
  // with the tokens the target commits there (AcceptanceStats).
  struct Proposal {
    std::vector<std::int32_t> drafts;
    std::size_t at = 0;  // generated.size() when proposed: drafts[j] guesses generated[at + j]
  };
  std::deque<Proposal> proposals;
  Completion completion;
};

bool starts_with(const std::vector<std::int32_t>& prompt, const std::vector<std::int32_t>& prefix) {
  return prompt.size() > prefix.size() && std::equal(prefix.begin(), prefix.end(), prompt.begin());
}

// One Generator::run: the sequences in flight and the steps that advance them. Each step admits
// requests into free slots, lays out the batch (decode rows first, then prompt chunks), agrees
// with every rank whether any group has work, drafts, steps the engine, and applies the sampled
// tokens.
class GenerationRun {
 public:
  GenerationRun(Engine& engine, const dist::Groups& groups, const GeneratorOptions& options,
                const std::vector<std::vector<std::int32_t>>& prefixes,
                std::span<const Request> requests, const Generator::TokenFn& on_token,
                const Generator::DoneFn& on_done, const Generator::ProgressFn& on_progress)
      : engine_(engine),
        groups_(groups),
        options_(options),
        prefixes_(prefixes),
        requests_(requests),
        on_token_(on_token),
        on_done_(on_done),
        on_progress_(on_progress),
        drafter_(options.drafter),
        speculation_(options.drafter ? options.speculation : nullptr) {
    if (speculation_) stats_.speculation.k_rounds.assign(speculation_->block() + 1, 0);
  }

  GeneratorStats run() {
    if (speculation_ && speculation_->adaptive()) {
      const double start = now();
      if (calibrate()) stats_.calibration_seconds = now() - start;
    }
    start_prefixes();
    while (true) {
      const double loop_start = now();
      admit();
      lay_out_batch();
      if (!agree_on_work()) break;
      draft_s_ = 0;
      if (drafting_) draft();
      const StepResult result = step();
      apply(result);
      retire();
      overhead_s_ = now() - loop_start - target_s_ - draft_s_;
    }
    stats_.seconds = now();
    return stats_;
  }

 private:
  double now() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }
  int prefix_slots() const { return static_cast<int>(prefixes_.size()); }

  // The cost model's points up to the batch this run can hold, or calibration_requests (a run of
  // more requests than any before it adds the missing ones), before any slot is in use: verify
  // steps on slot 0 of 1, then running x 1, 2, 4 .. (block + 1) rows, drafter calls for 1 and
  // `running` requests and context projections; each the faster of two (verify steps above
  // `running` rows that cost 4 or more times the smallest, dear and steady, once), averaged over
  // the world so that every rank of a DP group knows the same times. Few points, as each costs a
  // step: between them the curve interpolates, and real steps scale it. The larger steps stop once doubling the rows costs
  // nearly double (at least 2 / (1 + kMinGain) times): the step is compute-bound there, each
  // further row costs what the last ones did, and the slope that extends the curve beyond its last
  // point says just that. A deep model's batch-16 calibration then skips its 64- and 128-row steps.
  // False when the model already had every point.
  bool calibrate() {
    const auto block = static_cast<std::size_t>(speculation_->block());
    // Every rank calibrates the same steps: the largest batch over the DP groups.
    const std::size_t wanted =
        options_.calibration_requests > 0
            ? options_.calibration_requests
            : std::min(static_cast<std::size_t>(options_.max_running_requests), requests_.size());
    std::array<std::uint64_t, 1> largest = {wanted};
    dist::allreduce(groups_.world(), std::span<std::uint64_t>(largest), dist::ReduceOp::kMax);
    const auto running = std::min(static_cast<std::size_t>(engine_.options().slots),
                                  static_cast<std::size_t>(largest[0]));
    const std::size_t known = speculation_->cost().calibrated_requests();
    if (running == 0 || known >= running) return false;
    // The steps below write slot 0 and the drafter's first slots: prefixes left there are gone.
    if (options_.resident_prefixes) options_.resident_prefixes->prefixes.clear();
    const std::size_t context = engine_.options().context_length;
    const std::size_t max_rows = std::min(running * (block + 1), context);
    const std::size_t known_rows = std::min(known * (block + 1), context);
    std::vector<std::size_t> rows;
    if (known_rows == 0) rows.push_back(1);
    for (std::size_t r = running; r < max_rows; r *= 2)
      if (r > known_rows && r > 1) rows.push_back(r);
    if (max_rows > known_rows && (rows.empty() || rows.back() != max_rows)) rows.push_back(max_rows);
    std::vector<std::size_t> requests;
    if (known == 0) requests.push_back(1);
    if (running > 1) requests.push_back(running);

    // Drafter context projected in one batch: 64 rows (a slot's most) and twice that.
    std::vector<std::size_t> projected;
    for (std::size_t n = 64; known == 0 && n <= 128 && n <= context; n *= 2)
      projected.push_back(n);

    const int vocab = engine_.config().vocab_size;
    const std::size_t at_draft = rows.size(), at_projection = at_draft + requests.size();
    std::vector<double> seconds(at_projection + projected.size(), 1e30);
    auto verify_step = [&](std::size_t n) {
      std::vector<std::int32_t> tokens(n);
      for (std::size_t t = 0; t < tokens.size(); ++t)
        tokens[t] = static_cast<std::int32_t>((t * 7 + 1) % static_cast<std::size_t>(vocab));
      StepSequence sequence;
      sequence.tokens = tokens;
      sequence.output = StepSequence::Output::kEveryToken;
      sequence.speculative = true;
      engine_.reset_slot(0);
      const double t0 = now();
      engine_.step(std::span<const StepSequence>(&sequence, 1));
      return now() - t0;
    };
    const double ranks = groups_.world().size();
    for (int rep = 0; rep < 2; ++rep) {
      for (std::size_t i = 0; i < rows.size() && rows[i] <= running; ++i)
        seconds[i] = std::min(seconds[i], verify_step(rows[i]));
      for (std::size_t i = 0; i < requests.size(); ++i) {
        std::vector<DraftRequest> batch(requests[i]);
        for (std::size_t r = 0; r < batch.size(); ++r) {
          batch[r].slot = static_cast<int>(r);
          // Anchors new to every call: a real draft's Markov-head rows are rarely all kept.
          batch[r].anchor = static_cast<std::int32_t>(
              ((static_cast<std::size_t>(rep) * 64 + i) * running + r) * 7919 %
              static_cast<std::size_t>(vocab));
          drafter_->reset_slot(static_cast<int>(r));
        }
        const double t0 = now();
        drafter_->propose(batch);
        seconds[at_draft + i] = std::min(seconds[at_draft + i], now() - t0);
      }
      for (std::size_t i = 0; i < projected.size(); ++i) {
        const std::vector<float> taps(projected[i] * drafter_->tap_width(), 0.0f);
        drafter_->reset_slot(0);
        const double t0 = now();
        drafter_->extend(0, taps, projected[i]);
        seconds[at_projection + i] = std::min(seconds[at_projection + i], now() - t0);
      }
    }
    dist::allreduce(groups_.world(), std::span<double>(seconds), dist::ReduceOp::kSum);
    // Steps above the batch's plain rows: ascending, every rank agreeing on each before the
    // next. A dear one (4 or more times the smallest step) is steady and measured once; a cheap
    // one (a small batch's 2, 4 and 8 rows) is as noisy as the plain rows and, like them, the
    // faster of two: measured once, the deep pair's 8-row step on two ranks varied by a third
    // from run to run, and with it the K the policy chose.
    std::size_t measured = 0;
    while (measured < rows.size() && rows[measured] <= running) ++measured;
    const double smallest = measured > 0 ? seconds[0] : 0.0;  // none: every step counts as dear
    for (; measured < rows.size(); ++measured) {
      std::array<double, 1> t = {verify_step(rows[measured])};
      dist::allreduce(groups_.world(), std::span<double>(t), dist::ReduceOp::kSum);
      if (t[0] < 4 * smallest) {
        std::array<double, 1> again = {verify_step(rows[measured])};
        dist::allreduce(groups_.world(), std::span<double>(again), dist::ReduceOp::kSum);
        t[0] = std::min(t[0], again[0]);
      }
      seconds[measured] = t[0];
      if (measured > 0 && StepCostModel::compute_bound(rows[measured - 1], seconds[measured - 1],
                                                        rows[measured], seconds[measured])) {
        ++measured;
        break;
      }
    }
    rows.resize(measured);
    StepCostModel& cost = speculation_->cost();
    for (std::size_t i = 0; i < rows.size(); ++i) cost.calibrate_target(rows[i], seconds[i] / ranks);
    for (std::size_t i = 0; i < requests.size(); ++i)
      cost.calibrate_draft(requests[i], seconds[at_draft + i] / ranks);
    for (std::size_t i = 0; i < projected.size(); ++i)
      cost.calibrate_projection(projected[i], seconds[at_projection + i] / ranks);
    if (projected.size() == 2) {
      // A few rows cost what the line through the two points says at them (its intercept: the
      // matrices read once), not what 64 do.
      const double t64 = seconds[at_projection] / ranks, t128 = seconds[at_projection + 1] / ranks;
      cost.calibrate_projection(1, std::clamp(2 * t64 - t128, 0.0, t64) + (t128 - t64) / 64);
    }
    if (spdlog::should_log(spdlog::level::debug)) {
      auto points = [&](const std::vector<std::size_t>& at, std::size_t first) {
        std::string line;
        for (std::size_t i = 0; i < at.size(); ++i)
          line += fmt::format(" {}:{:.2f}", at[i], seconds[first + i] / ranks * 1e3);
        return line;
      };
      spdlog::debug(
          "speculation: calibrated target ms by rows{}; drafter ms by requests{}; projection ms "
          "by rows{}",
          points(rows, 0), points(requests, at_draft), points(projected, at_projection));
    }
    engine_.reset_slot(0);
    for (int r = 0; r < static_cast<int>(running); ++r) drafter_->reset_slot(r);
    return true;
  }

  // Prefix snapshots first, each in its own slot; requests wait until all are computed. Those an
  // earlier run left in their slots (GeneratorOptions::resident_prefixes) are not computed again.
  void start_prefixes() {
    for (int s = prefix_slots(); s < engine_.options().slots; ++s) free_slots_.push_back(s);
    ResidentPrefixes* resident = options_.resident_prefixes;
    if (resident && !prefixes_.empty() && resident->prefixes == prefixes_) return;
    if (resident) resident->prefixes.clear();  // recorded again once all are computed
    recording_ = resident && !prefixes_.empty();
    for (int i = 0; i < prefix_slots(); ++i) {
      Sequence s;
      s.prompt = &prefixes_[static_cast<std::size_t>(i)];
      s.slot = i;
      engine_.reset_slot(i);
      if (drafter_) drafter_->reset_slot(i);
      prefills_.push_back(std::move(s));
    }
  }

  // The longest registered prefix `prompt` starts with, or -1.
  int longest_prefix(const std::vector<std::int32_t>& prompt) const {
    int best = -1;
    for (int p = 0; p < prefix_slots(); ++p) {
      const auto& prefix = prefixes_[static_cast<std::size_t>(p)];
      if (starts_with(prompt, prefix) &&
          (best < 0 || prefix.size() > prefixes_[static_cast<std::size_t>(best)].size())) {
        best = p;
      }
    }
    return best;
  }

  void admit() {
    if (!prefills_.empty()) return;
    std::size_t admitted = 0;
    while (next_request_ < requests_.size() &&
           static_cast<int>(running_.size()) < options_.max_running_requests &&
           !free_slots_.empty()) {
      Sequence s;
      s.request = &requests_[next_request_++];
      s.prompt = &s.request->prompt;
      s.slot = free_slots_.front();
      free_slots_.pop_front();
      s.completion.id = s.request->id;
      s.completion.prompt_tokens = s.prompt->size();
      s.completion.admitted_s = now();
      const int best = longest_prefix(*s.prompt);
      if (best >= 0) {
        engine_.copy_slot(best, s.slot);
        if (drafter_) drafter_->copy_slot(best, s.slot);
        s.fed = prefixes_[static_cast<std::size_t>(best)].size();
        s.completion.cached_prompt_tokens = s.fed;
        stats_.cached_tokens += s.fed;
      } else {
        engine_.reset_slot(s.slot);
        if (drafter_) drafter_->reset_slot(s.slot);
      }
      running_.push_back(std::move(s));
      ++admitted;
    }
    // Requests admitted at a load where drafting cannot pay never build a drafter context:
    // their prompts are not projected.
    if (admitted > 0) drop_contexts_where_drafting_cannot_pay();
  }

  // At a load where no draft could pay even were every draft right (Speculation::could_pay:
  // the group's running requests all decoding, no prompt rows, as most steps are; a prompt
  // chunk in one step says nothing of the next), a drafter context earns nothing: every running
  // request drops its own and decodes plainly to its end, at no further cost to the drafter. A
  // load that falls later, as requests finish, drafts for the requests admitted then.
  void drop_contexts_where_drafting_cannot_pay() {
    if (!speculation_ || running_.empty()) return;
    std::vector<SpeculationCandidate> load;
    for (const Sequence& s : running_) load.push_back(candidate(s));
    const bool draining = next_request_ >= requests_.size() && prefills_.empty();
    if (speculation_->could_pay(load, 0, draining)) return;
    for (Sequence& s : running_) drop_context(s);
  }

  // The policy's view of a running request (as if decoding: the load once its prompt is in).
  SpeculationCandidate candidate(const Sequence& s) const {
    // A round feeds no more drafts than the request could still use (so never past its
    // context): the anchor and K drafts commit at most K + 1 tokens.
    const std::size_t room = s.request->max_new_tokens - s.generated.size();
    const int block = speculation_ ? speculation_->block() : drafter_block_;
    const int max_k = s.without_context
                          ? 0
                          : static_cast<int>(std::min<std::size_t>(block, room > 0 ? room - 1 : 0));
    const std::size_t pending = drafter_ && !s.without_context ? drafter_->pending(s.slot) : 0;
    return {s.request->id, max_k, pending, room};
  }

  void drop_context(Sequence& s) {
    if (s.without_context) return;
    drafter_->reset_slot(s.slot);
    s.without_context = true;
  }

  // How many drafts each decoding sequence verifies this step (all 0 without a drafter).
  void choose_draft_lengths(std::size_t prefill_rows) {
    std::vector<Sequence*> decoding;
    std::vector<SpeculationCandidate> candidates;
    if (std::any_of(running_.begin(), running_.end(), [](const Sequence& s) { return s.decoding; }))
      drop_contexts_where_drafting_cannot_pay();
    for (Sequence& s : running_) {
      if (!s.decoding) continue;
      decoding.push_back(&s);
      candidates.push_back(candidate(s));
    }
    std::vector<int> k(candidates.size(), 0);
    if (speculation_) {
      if (!candidates.empty()) speculation_->acceptance().age();
      // Draining: nobody waits for a slot, so the group ends with its last request.
      const bool draining = next_request_ >= requests_.size() && prefills_.empty();
      k = speculation_->choose(candidates, prefill_rows, draining);
    } else if (drafter_) {
      for (std::size_t i = 0; i < k.size(); ++i) k[i] = candidates[i].max_k;
    }
    for (std::size_t i = 0; i < decoding.size(); ++i) decoding[i]->k = drafter_ ? k[i] : 0;
  }

  // This step: the decoding sequences' last tokens, those that verify drafts first (their
  // blocks filled in once the drafter has proposed), then prompt chunks within the budget.
  void lay_out_batch() {
    batch_.clear();
    batch_seq_.clear();
    std::vector<StepSequence> prefill;
    std::vector<Sequence*> prefill_seq;
    // A prompt is fed in chunks that end at multiples of chunked_prefill_size (or at its end),
    // whatever else shares the step: a sequence's chunks, and so its numbers, never depend on
    // its batch (KDA's chunked form and MLA's blocks follow the chunk boundaries). A chunk that
    // no longer fits the step's budget waits for the next step, and so do the ones after it.
    const std::size_t size = options_.chunked_prefill_size;
    std::size_t budget = size, prefill_rows = 0;
    bool full = false;
    auto add_prefill = [&](Sequence& s) {
      if (s.decoding || full) return;
      const std::size_t boundary = (s.fed / size + 1) * size;
      const std::size_t chunk = std::min(boundary, s.prompt->size()) - s.fed;
      if (chunk > budget) {
        full = true;
        return;
      }
      budget -= chunk;
      prefill_rows += chunk;
      StepSequence step;
      step.slot = s.slot;
      step.tokens = std::span<const std::int32_t>(*s.prompt).subspan(s.fed, chunk);
      const bool completes = s.fed + chunk == s.prompt->size();
      step.output =
          completes && s.request ? StepSequence::Output::kNextToken : StepSequence::Output::kNone;
      if (s.request) step.sampling = s.request->sampling;
      prefill.push_back(step);
      prefill_seq.push_back(&s);
    };
    for (Sequence& s : prefills_) add_prefill(s);
    for (Sequence& s : running_) add_prefill(s);

    choose_draft_lengths(prefill_rows);
    for (const bool verifies : {true, false}) {
      for (Sequence& s : running_) {
        if (!s.decoding || (s.k > 0) != verifies) continue;
        StepSequence step;
        step.slot = s.slot;
        step.tokens = std::span<const std::int32_t>(&s.generated.back(), 1);
        step.output = verifies ? StepSequence::Output::kEveryToken : StepSequence::Output::kNextToken;
        step.speculative = verifies;
        step.sampling = s.request->sampling;
        batch_.push_back(step);
        batch_seq_.push_back(&s);
      }
      if (verifies) verifying_ = batch_.size();
    }
    decoding_ = batch_.size();
    batch_.insert(batch_.end(), prefill.begin(), prefill.end());
    batch_seq_.insert(batch_seq_.end(), prefill_seq.begin(), prefill_seq.end());
    // Rows as the drafts will make them: the cost model's measure of this step.
    plain_rows_ = prefill_rows + decoding_;
    step_rows_ = plain_rows_;
    for (std::size_t i = 0; i < verifying_; ++i) step_rows_ += batch_seq_[i]->k;
  }

  // One allreduce per step: who has work, broken logits, and the progress counters. Only the
  // first rank of each attention-TP group counts progress, so each group counts once. False
  // when no DP group has work left.
  bool agree_on_work() {
    dist::set_stage_step(stats_.steps + 1);  // for the watchdog
    const bool work = !batch_.empty() || next_request_ < requests_.size() || !running_.empty();
    const bool leader = groups_.attn_tp().rank() == 0;
    // The previous step's times (ns) ride along, so that every rank refines its cost model with
    // the same world-mean figures; and whether any group drafts this step.
    auto ns = [](double s) { return static_cast<std::uint64_t>(std::max(0.0, s) * 1e9); };
    std::array<std::uint64_t, 11> flags = {work ? 1u : 0u,
                                           nonfinite_ ? 1u : 0u,
                                           leader ? finished_ : 0u,
                                           leader ? generated_ : 0u,
                                           leader ? stats_.verify_rounds : 0u,
                                           leader ? stats_.drafted_tokens : 0u,
                                           leader ? stats_.accepted_drafts : 0u,
                                           verifying_,
                                           ns(target_s_),
                                           ns(draft_s_),
                                           ns(overhead_s_)};
    {
      const dist::TrafficScope traffic(dist::Traffic::kDpSync);
      dist::allreduce(groups_.world(), std::span<std::uint64_t>(flags), dist::ReduceOp::kSum);
    }
    drafting_ = flags[7] > 0;
    learn_step_times(static_cast<double>(flags[8]), static_cast<double>(flags[9]),
                     static_cast<double>(flags[10]));
    if (on_progress_ && stats_.steps > 0) {
      on_progress_({flags[2], flags[3], stats_.steps, flags[4], flags[5], flags[6]});
    }
    if (flags[1]) {
      throw InputError(
          "the model produced non-finite logits (NaN or infinity); the checkpoint's "
          "weights or scales are broken");
    }
    return flags[0] != 0;
  }

  // The previous step's times summed over the world's ranks (ns), into the cost model.
  void learn_step_times(double target_ns, double draft_ns, double overhead_ns) {
    const double ranks = groups_.world().size();
    if (speculation_ && last_rows_ > 0) {
      StepCostModel& cost = speculation_->cost();
      const double target_s = target_ns / ranks * 1e-9;
      const double projection_s = cost.projection_seconds(last_projected_);
      const double draft_s = std::max(0.0, draft_ns / ranks * 1e-9 - projection_s);
      if (spdlog::should_log(spdlog::level::debug)) {  // the model's predictions cost lookups
        spdlog::debug(
            "speculation: step of {} rows: target {:.2f} ms (model {:.2f}); drafter for {} "
            "requests {:.2f} ms (model {:.2f}) after projecting {} rows ({:.2f} ms by the model)",
            last_rows_, target_s * 1e3, cost.target_seconds(last_rows_) * 1e3, last_drafted_,
            draft_s * 1e3, cost.draft_seconds(last_drafted_) * 1e3, last_projected_,
            projection_s * 1e3);
      }
      cost.observe_target(last_rows_, target_s);
      if (last_drafted_ > 0) cost.observe_draft(last_drafted_, draft_s);
      // A step with prompt rows also admitted requests (up to ~3x a decode step's time on a
      // small model): not the fixed cost a decode step pays, which is what the policy weighs
      // on both sides. Taken in, it made drafting look cheap for the first decode steps.
      if (last_prefill_rows_ == 0) cost.observe_overhead(overhead_ns / ranks * 1e-9);
    }
    last_rows_ = 0;
    last_drafted_ = 0;
    last_projected_ = 0;
  }

  // When any group drafts, every rank calls the drafter once, with its DP group's verifying
  // sequences or none; each verifies its first K proposals.
  void draft() {
    std::vector<DraftRequest> drafts(verifying_);
    for (std::size_t i = 0; i < verifying_; ++i) {
      const Sequence& s = *batch_seq_[i];
      drafts[i] = {s.slot, s.generated.back(), s.request->sampling};
      last_projected_ += drafter_->pending(s.slot);
    }
    const double t0 = now();
    const auto proposed = [&] {
      const dist::TrafficScope traffic(dist::Traffic::kDraft);
      return drafter_->propose(drafts);
    }();
    draft_s_ = now() - t0;
    for (std::size_t i = 0; i < verifying_; ++i) {
      Sequence& s = *batch_seq_[i];
      const std::size_t fed = std::min(proposed[i].size(), static_cast<std::size_t>(s.k));
      s.block.assign(1, s.generated.back());
      s.block.insert(s.block.end(), proposed[i].begin(),
                     proposed[i].begin() + static_cast<std::ptrdiff_t>(fed));
      batch_[i].tokens = s.block;
      if (speculation_) s.proposals.push_back({proposed[i], s.generated.size()});
    }
  }

  // The engine's step; the first rank of the attention-TP group decides every sampled token for
  // its group.
  StepResult step() {
    const double t0 = now();
    StepResult result = engine_.step(batch_);
    target_s_ = now() - t0;
    last_rows_ = step_rows_;
    last_prefill_rows_ = plain_rows_ - decoding_;
    last_drafted_ = drafting_ ? verifying_ : 0;
    ++stats_.steps;
    nonfinite_ = result.nonfinite_logits > 0;
    if (groups_.attn_tp().size() <= 1 || result.next.empty()) return result;
    const dist::TrafficScope traffic(dist::Traffic::kLmHead);
    dist::bcast(groups_.attn_tp(), std::span<std::int32_t>(result.next), 0);
    if (verifying_ > 0) {
      std::vector<std::int32_t> flat;
      for (std::size_t i = 0; i < verifying_; ++i)
        flat.insert(flat.end(), result.every[i].begin(), result.every[i].end());
      dist::bcast(groups_.attn_tp(), std::span<std::int32_t>(flat), 0);
      for (std::size_t i = 0, at = 0; i < verifying_; at += result.every[i].size(), ++i)
        std::copy_n(flat.begin() + static_cast<std::ptrdiff_t>(at), result.every[i].size(),
                    result.every[i].begin());
    }
    return result;
  }

  // One sampled token of a request: a stop token, a stop string or the length ends it.
  // Returns false once the request has finished.
  bool emit(Sequence& s, std::int32_t token) {
    Completion& c = s.completion;
    if (c.completion_tokens == 0) c.first_token_s = now();
    ++c.completion_tokens;
    ++generated_;
    ++stats_.generated_tokens;
    const auto& stops = s.request->stop_tokens;
    std::optional<Completion::Finish> finish;
    if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
      finish = Completion::Finish::kStopToken;
    } else {
      s.generated.push_back(token);
      if (on_token_ && !on_token_(*s.request, s.generated)) {
        finish = Completion::Finish::kStopped;
      } else if (s.generated.size() >= s.request->max_new_tokens) {
        finish = Completion::Finish::kLength;
      }
    }
    if (!finish) return true;
    c.finish = *finish;
    c.tokens = s.generated;
    c.finished_s = now();
    ++finished_;
    const Request& done = *s.request;
    s.request = nullptr;  // marks it for removal by retire()
    if (on_done_) on_done_(done, c);
    return false;
  }

  // A round: keep the drafts the target agrees with and its own next token after them.
  void apply_round(Sequence& s, const std::vector<std::int32_t>& verified,
                   std::span<const float> taps, std::size_t tap_width) {
    const std::span<const std::int32_t> fed(s.block);
    const std::size_t accepted = accepted_drafts(fed.subspan(1), verified);
    engine_.commit(s.slot, accepted + 1);
    drafter_->extend(s.slot, taps.first((accepted + 1) * tap_width), accepted + 1);
    ++stats_.verify_rounds;
    stats_.drafted_tokens += fed.size() - 1;
    stats_.accepted_drafts += accepted;
    stats_.decode_tokens += fed.size();
    for (std::size_t k = 0; k <= accepted; ++k) {
      const std::int32_t token = k < accepted ? fed[k + 1] : verified[accepted];
      ++committed_;
      if (!emit(s, token)) break;
    }
  }

  // Each proposal of `s` whose drafts are decided (a wrong one committed, all of them committed,
  // or the request finished) goes into the acceptance statistics.
  void score_proposals(Sequence& s, std::uint64_t request, bool finished) {
    AcceptanceStats& stats = speculation_->acceptance();
    while (!s.proposals.empty()) {
      const Sequence::Proposal& p = s.proposals.front();
      const std::size_t known = s.generated.size() - std::min(s.generated.size(), p.at);
      const std::span<const std::int32_t> committed(s.generated.data() + p.at,
                                                     std::min(known, p.drafts.size()));
      const bool wrong = !std::equal(committed.begin(), committed.end(), p.drafts.begin());
      if (!wrong && committed.size() < p.drafts.size() && !finished) break;
      stats.observe(request, p.drafts, committed);
      s.proposals.pop_front();
    }
    if (finished) stats.forget(request);
  }

  void apply(const StepResult& result) {
    committed_ = 0;
    // With a drafter every fed row comes back with its taps, [rows, taps x hidden].
    const std::size_t tap_width = drafter_ ? drafter_->tap_width() : 0;
    if (drafter_) {
      std::size_t rows = 0;
      for (const StepSequence& b : batch_) rows += b.tokens.size();
      if (result.taps.size() != rows * tap_width) {
        throw InternalError("generator: the engine does not tap the layers the drafter reads");
      }
    }
    std::size_t row = 0;  // the batch entry's first row in result.taps
    for (std::size_t i = 0; i < batch_.size(); row += batch_[i].tokens.size(), ++i) {
      Sequence& s = *batch_seq_[i];
      const std::size_t rows = batch_[i].tokens.size();
      const auto taps = std::span<const float>(result.taps).subspan(row * tap_width, rows * tap_width);
      const std::uint64_t request = s.request ? s.request->id : 0;
      if (i < decoding_ && speculation_) ++stats_.speculation.k_rounds[static_cast<std::size_t>(s.k)];
      if (i < verifying_) {
        apply_round(s, result.every[i], taps, tap_width);
      } else {
        if (!s.decoding) {
          s.fed += rows;
          stats_.prefill_tokens += rows;
          if (s.fed == s.prompt->size()) s.decoding = true;
        } else {
          ++stats_.decode_tokens;
          ++committed_;
        }
        if (drafter_ && !s.without_context) drafter_->extend(s.slot, taps, rows);
        if (result.next[i] >= 0 && s.request) emit(s, result.next[i]);
      }
      if (speculation_ && i < decoding_) score_proposals(s, request, s.request == nullptr);
    }
    tally_step();
  }

  // A step with decode rows: its time, and what the cost model says decoding its committed
  // tokens plainly would have taken (steps of the same prefill rows and one row per request).
  void tally_step() {
    if (!speculation_ || decoding_ == 0) return;
    SpeculationTally& t = stats_.speculation;
    const StepCostModel& cost = speculation_->cost();
    t.measured_s += target_s_ + draft_s_ + cost.overhead_seconds();
    if (cost.empty()) return;
    const double plain_step = cost.target_seconds(plain_rows_) + cost.overhead_seconds();
    t.plain_estimate_s +=
        plain_step * static_cast<double>(committed_) / static_cast<double>(decoding_);
  }

  // Finished prefixes leave the prefill list; finished requests give back their slots.
  void retire() {
    prefills_.erase(std::remove_if(prefills_.begin(), prefills_.end(),
                                   [](const Sequence& s) { return s.decoding; }),
                    prefills_.end());
    if (recording_ && prefills_.empty()) {
      options_.resident_prefixes->prefixes = prefixes_;
      recording_ = false;
    }
    for (auto it = running_.begin(); it != running_.end();) {
      if (it->request == nullptr) {
        free_slots_.push_back(it->slot);
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
  }

  Engine& engine_;
  const dist::Groups& groups_;
  const GeneratorOptions& options_;
  const std::vector<std::vector<std::int32_t>>& prefixes_;
  std::span<const Request> requests_;
  const Generator::TokenFn& on_token_;
  const Generator::DoneFn& on_done_;
  const Generator::ProgressFn& on_progress_;
  DraftSource* const drafter_;
  const Clock::time_point t0_ = Clock::now();

  GeneratorStats stats_;
  std::vector<Sequence> prefills_;  // prefix snapshots being computed
  std::vector<Sequence> running_;   // admitted requests, in admission order
  std::deque<int> free_slots_;
  std::size_t next_request_ = 0;
  bool nonfinite_ = false;
  std::uint64_t finished_ = 0, generated_ = 0;  // by this DP group
  std::vector<StepSequence> batch_;
  std::vector<Sequence*> batch_seq_;
  std::size_t verifying_ = 0;  // the batch's first entries that are verify rounds
  std::size_t decoding_ = 0;   // the batch's first entries that are decode rows (verify or plain)

  // Speculation: the policy, this step's rows (drafts included) and whether any group drafts;
  // the last step's measured times, shared in the next step's allreduce.
  Speculation* const speculation_;
  // Without a Speculation every round verifies the drafter's whole proposal.
  static constexpr int drafter_block_ = 1 << 20;
  // plain_rows_: the step's prefill rows and one row per decoding sequence (no drafts).
  std::size_t step_rows_ = 0, plain_rows_ = 0, last_rows_ = 0, last_drafted_ = 0;
  std::size_t last_prefill_rows_ = 0;
  std::size_t last_projected_ = 0;  // the drafter's pending rows its last call projected first
  std::size_t committed_ = 0;  // tokens the decode rows committed this step
  bool drafting_ = false;
  double target_s_ = 0, draft_s_ = 0, overhead_s_ = 0;
  bool recording_ = false;  // this run computes the prefixes it leaves resident
};

}  // namespace

GeneratorStats Generator::run(std::span<const Request> requests, const TokenFn& on_token,
                              const DoneFn& on_done, const ProgressFn& on_progress) {
  return GenerationRun(engine_, groups_, options_, prefixes_, requests, on_token, on_done,
                       on_progress)
      .run();
}

}  // namespace k3::model::engine
