#include "apps/k3eval/model_loading.h"

#include <sys/resource.h>

#include <chrono>
#include <functional>

#include <spdlog/spdlog.h>

#include "model/format.h"

namespace k3::apps {

namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t rss_peak() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<std::uint64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

std::string join_problems(const std::string& what, const std::vector<std::string>& problems) {
  std::string text = std::to_string(problems.size()) + " " + what + ":";
  for (std::size_t i = 0; i < problems.size() && i < 20; ++i) text += "\n  " + problems[i];
  if (problems.size() > 20) text += "\n  ... and " + std::to_string(problems.size() - 20) + " more";
  return text;
}

std::optional<model::FormatKind> parse_load_format(const std::string& name) {
  if (name == "auto") return std::nullopt;
  auto format = model::format_from_name(name);
  if (!format) {
    throw UsageError("--load-format '" + name + "' is not one of auto, hf, modelslim, gguf, draft");
  }
  return format;
}

// Headers first: every data-free check passes on every rank before any tensor data is read, and
// a wrong checkpoint is reported once, by the lowest failing rank.
void plan_checkpoint(dist::Runtime& runtime, const dist::Layout& layout, const std::string& path,
                     std::optional<model::FormatKind> format, LoadedCheckpoint& out,
                     const std::function<void(const model::Checkpoint&)>& extra_checks = {}) {
  runtime.collectively([&] {
    out.checkpoint.emplace(model::Checkpoint::open(path, format));
    if (extra_checks) extra_checks(*out.checkpoint);
    const auto specs = model::kimi_k3_parameters(out.checkpoint->config(), layout);
    out.bound = model::bind_parameters(*out.checkpoint, specs);
    if (!out.bound.problems.empty()) {
      throw InputError(
          path + ": " +
          join_problems("problem(s) found before reading any tensor data", out.bound.problems));
    }
    out.plan.emplace(
        model::make_load_plan(*out.checkpoint, out.bound.bindings, layout, runtime.rank()));
  });
  const model::Checkpoint& ck = *out.checkpoint;
  spdlog::info("{}: format {} ({}), {} files, {:.3f} GiB; rank 0 reads {:.3f} GiB from {} files",
               path, ck.format().name(), ck.format().capability_list(), ck.files().size(),
               gib(ck.tensor_bytes()), gib(out.plan->bytes), out.plan->files.size());
}

void load_checkpoint(dist::Runtime& runtime, LoadedCheckpoint& out) {
  const int rank = runtime.rank();
  runtime.collectively([&] {
    out.result.emplace(model::load(*out.checkpoint, *out.plan, [&](const model::LoadProgress& p) {
      if (rank == 0) {
        spdlog::info("{}/{} shards, {:.3f} GiB, {:.2f} GB/s", p.files_done, p.files_total,
                     gib(p.bytes_done), p.seconds > 0 ? p.bytes_done / p.seconds / 1e9 : 0.0);
      }
    }));
    const auto problems = model::audit(*out.checkpoint, *out.plan, out.result->weights);
    if (!problems.empty())
      throw InputError(join_problems("audit problem(s) after loading", problems));
  });
}

// A draft is loaded beside its target only when the two fit together.
void check_draft_fits(const model::Checkpoint& draft, const model::ModelConfig& target) {
  const model::ModelConfig& d = draft.config();
  if (!draft.format().has(model::Capability::kDraftModel)) {
    throw InputError(draft.root() +
                     ": --draft-model-path needs a draft checkpoint (format draft), got format " +
                     std::string(draft.format().name()));
  }
  if (d.hidden_size != target.hidden_size || d.vocab_size != target.vocab_size) {
    throw InputError(draft.root() + ": draft hidden_size " + std::to_string(d.hidden_size) +
                     " / vocab_size " + std::to_string(d.vocab_size) +
                     " do not match the target's " + std::to_string(target.hidden_size) + " / " +
                     std::to_string(target.vocab_size));
  }
  for (int l : d.draft_target_layers) {
    if (l >= target.num_hidden_layers) {
      throw InputError(draft.root() + ": draft taps target layer " + std::to_string(l) +
                       " but the target has " + std::to_string(target.num_hidden_layers) +
                       " layers");
    }
  }
}

}  // namespace

double gib(double bytes) { return bytes / double(1ull << 30); }

std::uint64_t peak_rss_bytes() { return rss_peak(); }

LoadedModel load_model(dist::Runtime& runtime, const dist::Groups& groups,
                       const K3evalOptions& options) {
  LoadedModel out;
  const auto t0 = Clock::now();
  const dist::Layout& layout = groups.layout();
  std::optional<model::FormatKind> format;
  runtime.collectively([&] { format = parse_load_format(options.load_format); });

  LoadedCheckpoint& main_model = out.main;
  LoadedCheckpoint& draft = out.draft;
  plan_checkpoint(
      runtime, layout, options.model_path, format, main_model, [](const model::Checkpoint& ck) {
        if (ck.format().has(model::Capability::kDraftModel)) {
          throw InputError(ck.root() +
                           ": --model-path holds a draft model; pass it with --draft-model-path");
        }
      });
  if (!options.draft_model_path.empty()) {
    plan_checkpoint(runtime, layout, options.draft_model_path, model::FormatKind::kDraft, draft,
                    [&](const model::Checkpoint& ck) {
                      check_draft_fits(ck, main_model.checkpoint->config());
                    });
  }
  spdlog::info("planned in {:.2f} s", std::chrono::duration<double>(Clock::now() - t0).count());

  load_checkpoint(runtime, main_model);
  if (draft.checkpoint) load_checkpoint(runtime, draft);

  out.plan_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

}  // namespace k3::apps
