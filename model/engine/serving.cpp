#include "model/engine/serving.h"

#include <algorithm>
#include <fstream>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "common/error.h"
#include "model/checkpoint/tokenizer_files.h"

namespace k3::model::engine {

namespace {

double gib(double bytes) { return bytes / double(1ull << 30); }

EngineOptions engine_options(const ServingOptions& o, const ModelConfig* draft,
                             const Tokenizer& tokenizer, const ModelConfig& target) {
  EngineOptions e;
  if (draft) tap_for_drafter(*draft->dspark, e);
  e.exact = o.exact;
  e.repack_weights = o.repack_weights;
  e.trace_layers = o.trace_layers;
  e.slots = o.slots > 0 ? o.slots : o.running_requests + 1;
  e.context_length = o.context_length;
  // Sample only ids the tokenizer can decode (a synthetic wide or full preset pads its model
  // vocabulary beyond its 4352-token tokenizer).
  const auto tokenizer_ids = static_cast<std::size_t>(tokenizer.size());
  if (tokenizer_ids < static_cast<std::size_t>(target.vocab_size)) {
    e.sampled_vocabulary = tokenizer_ids;
    spdlog::info("the tokenizer defines {} of the model's {} token ids; the others are never "
                 "sampled",
                 tokenizer_ids, target.vocab_size);
  }
  return e;
}

// What the engine and the drafter will hold on this rank, refused before anything is allocated
// when it exceeds what the host can give.
void check_budget(const dist::Groups& groups, const ServingModel& model, const ServingOptions& o,
                  const EngineOptions& options, const DrafterOptions* drafter) {
  MemoryBudget budget =
      Engine::budget(*model.config, groups.layout(), options, model.weights->bytes());
  if (drafter) {
    // The drafter's weights and every slot's draft context; what a verify round keeps of its
    // block + 1 tokens per running sequence for the KDA layers' commit.
    const auto block = static_cast<std::uint64_t>(drafter->block_size);
    budget.weight_bytes += model.draft_weights->bytes();
    budget.state_bytes +=
        static_cast<std::uint64_t>(options.slots) * options.context_length *
            Drafter::context_bytes_per_token(*model.draft_config, groups.layout()) +
        static_cast<std::uint64_t>(o.running_requests) * (block + 1) *
            budget.kda_verify_bytes_per_token;
  }
  const std::uint64_t available =
      o.available_bytes > 0 ? o.available_bytes : available_bytes_per_rank(groups);
  if (budget.total() > available) {
    throw InputError(fmt::format(
        "the engine needs {:.3f} GiB per rank ({:.3f} GiB weights + {} state slots x {} tokens "
        "of context = {:.3f} GiB) but this host has {:.3f} GiB available per rank: lower "
        "--max-running-requests, --max-mamba-cache-size or --context-length",
        gib(budget.total()), gib(budget.weight_bytes), options.slots, options.context_length,
        gib(budget.state_bytes), gib(available)));
  }
  spdlog::debug("engine: {:.3f} GiB weights, up to {:.3f} GiB of sequence state",
                gib(budget.weight_bytes), gib(budget.state_bytes));
}

}  // namespace

std::uint64_t available_bytes_per_rank(const dist::Groups& groups) {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") break;
  }
  return kib * 1024 / static_cast<std::uint64_t>(std::max(1, groups.node().size()));
}

void check_draft_fits(const ModelConfig& d, const std::string& draft_root,
                      const ModelConfig& target) {
  if (!d.dspark) {
    throw InputError(draft_root + ": --draft-model-path needs a draft checkpoint (format draft)");
  }
  const std::string config = (std::filesystem::path(draft_root) / "config.json").string();
  auto differs = [&](const char* key, int draft_value, int target_value) {
    if (draft_value != target_value) {
      throw InputError(config + ": draft " + key + " " + std::to_string(draft_value) +
                       " differs from the target's " + std::to_string(target_value) +
                       " (the draft uses the target's hidden states, embedding and LM head)");
    }
  };
  differs("hidden_size", d.hidden_size, target.hidden_size);
  differs("vocab_size", d.vocab_size, target.vocab_size);
  for (int l : d.dspark->target_layer_ids) {
    if (l >= target.num_hidden_layers) {
      throw InputError(config + ": dflash_config.target_layer_ids taps target layer " +
                       std::to_string(l) + ", but the target has " +
                       std::to_string(target.num_hidden_layers) + " layers (0-based: at most " +
                       std::to_string(target.num_hidden_layers - 1) + ")");
    }
  }
  if (d.dspark->mask_token_id >= target.vocab_size) {
    throw InputError(config + ": dflash_config.mask_token_id " +
                     std::to_string(d.dspark->mask_token_id) +
                     " is outside the target's vocabulary of " + std::to_string(target.vocab_size));
  }
}

Serving build_serving(dist::Runtime& runtime, const dist::Groups& groups,
                      const ServingModel& model, const ServingOptions& o) {
  std::optional<Tokenizer> tokenizer;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Drafter> drafter;
  std::unique_ptr<Speculation> speculation;
  int block_size = 0;
  runtime.collectively([&] {
    const ModelConfig& target = *model.config;
    const ModelConfig* draft = o.speculative ? model.draft_config : nullptr;
    if (o.speculative && !draft) {
      throw UsageError("speculative decoding needs a draft model (--draft-model-path)");
    }
    if (draft) check_draft_fits(*draft, model.draft_root, target);
    tokenizer.emplace(open_tokenizer(o.model_path, target));
    const EngineOptions options = engine_options(o, draft, *tokenizer, target);
    std::optional<DrafterOptions> d;
    if (draft) d = drafter_options(*draft->dspark, options, o.speculative_block_size);
    check_budget(groups, model, o, options, d ? &*d : nullptr);
    engine = std::make_unique<Engine>(target, *model.weights, groups, options);
    if (!draft) return;
    spdlog::debug("drafter: {:.3f} GiB weights", gib(model.draft_weights->bytes()));
    drafter = std::make_unique<Drafter>(*draft, *model.draft_weights, *engine, groups, *d);
    block_size = d->block_size;
    speculation = std::make_unique<Speculation>(block_size, o.speculation);
    spdlog::info("speculative decoding: dspark, block size {} (verify width up to {}), taps of "
                 "target layers {}; drafts verified per round: {}",
                 d->block_size, d->block_size + 1, fmt::join(draft->dspark->target_layer_ids, ","),
                 speculation->adaptive()
                     ? std::string("chosen per request and step by goodput")
                     : std::to_string(o.speculation.fixed_k < 0 ? d->block_size
                                                                : o.speculation.fixed_k));
  });
  return Serving{std::move(*tokenizer), std::move(engine), std::move(drafter), block_size,
                 std::move(speculation)};
}

}  // namespace k3::model::engine
