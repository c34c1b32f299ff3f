#include "apps/k3eval/model_loading.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>

#include <spdlog/spdlog.h>

#include "dist/collectives.h"
#include "model/checkpoint/format.h"
#include "model/engine/serving.h"

namespace k3::apps {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::optional<model::FormatKind> parse_load_format(const std::string& name) {
  if (name == "auto") return std::nullopt;
  auto format = model::format_from_name(name);
  if (!format) {
    throw UsageError("--load-format '" + name + "' is not one of auto, hf, modelslim, gguf, draft");
  }
  return format;
}

void log_planned(const std::string& what, const LoadedCheckpoint& c) {
  const model::Checkpoint& ck = c.checkpoint();
  const model::CheckpointFigures& f = c.preflight->figures;
  spdlog::info("{} {}: format {} ({}), {} files, {} tensors, {:.3f} GiB; planned in {:.2f} s", what,
               ck.root(), ck.format().name(), ck.format().capability_list(), f.files, f.tensors,
               gib(static_cast<double>(f.bytes)), c.preflight->seconds);
}

// Each rank's own log: what it loaded, representation by representation, and the capability
// that chose each (as SGLang logs the quantization method it uses).
void log_loaded_representations(const std::string& what, const LoadedCheckpoint& c) {
  struct Tally {
    std::size_t params = 0;
    std::uint64_t bytes = 0;
  };
  std::map<std::string, Tally> by_repr;
  for (const model::PlannedParam& p : c.preflight->plan.params) {
    std::string key = p.repr.text;
    if (p.repr.asked) {
      key += std::string(" (") + std::string(model::capability_name(*p.repr.asked)) + "=" +
             (p.repr.answer ? "true" : "false") + ")";
    }
    Tally& t = by_repr[key];
    ++t.params;
    t.bytes += p.bytes;
  }
  const model::LoadStats& s = c.result->stats;
  spdlog::info("{}: loaded {:.3f} GiB from {} shard(s) in {:.2f} s, audit clean", what,
               gib(static_cast<double>(s.bytes_read)), s.files, s.total_seconds);
  for (const auto& [repr, t] : by_repr) {
    spdlog::info("{}: using {} for {} parameter(s), {:.1f} MiB", what, repr, t.params,
                 mib(static_cast<double>(t.bytes)));
  }
}

// Rank 0's production line over every rank: files any rank read (kept in c.shards_loaded), the
// slowest rank, the total.
void log_load_summary(const dist::Groups& groups, const std::string& what, LoadedCheckpoint& c) {
  const model::Checkpoint& ck = c.checkpoint();
  std::vector<std::uint8_t> touched(ck.files().size(), 0);
  for (std::size_t f : c.preflight->plan.files) touched[f] = 1;
  dist::allreduce(groups.world(), std::span<std::uint8_t>(touched), dist::ReduceOp::kMax);
  const double slowest =
      dist::allreduce(groups.world(), c.result->stats.total_seconds, dist::ReduceOp::kMax);
  const std::uint64_t bytes =
      dist::allreduce(groups.world(), c.result->stats.bytes_read, dist::ReduceOp::kSum);
  c.shards_loaded =
      static_cast<std::size_t>(std::count(touched.begin(), touched.end(), std::uint8_t{1}));
  spdlog::info("{}{}/{} shards loaded in {:.2f} s (slowest rank), {:.3f} GiB over {} ranks", what,
               c.shards_loaded, ck.files().size(), slowest, gib(static_cast<double>(bytes)),
               groups.world().size());
}

}  // namespace

double gib(double bytes) { return bytes / double(1ull << 30); }
double mib(double bytes) { return bytes / double(1ull << 20); }

std::uint64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<std::uint64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

LoadedModel plan_model(dist::Runtime& runtime, const dist::Groups& groups,
                       const K3evalOptions& options) {
  LoadedModel out;
  const auto t0 = Clock::now();
  const dist::Layout& layout = groups.layout();
  std::optional<model::FormatKind> format;
  runtime.collectively([&] { format = parse_load_format(options.load_format); });

  model::PreflightOptions main_options;
  main_options.path = options.model_path;
  main_options.load_format = format;
  main_options.checks = [](const model::Checkpoint& ck) {
    if (ck.format().has(model::Capability::kDraftModel)) {
      throw InputError(ck.root() +
                       ": --model-path holds a draft model; pass it with --draft-model-path");
    }
  };
  out.main.preflight.emplace(model::preflight(runtime, layout, main_options));
  log_planned("model", out.main);
  if (!options.draft_model_path.empty()) {
    model::PreflightOptions draft_options;
    draft_options.path = options.draft_model_path;
    draft_options.load_format = model::FormatKind::kDraft;
    const model::ModelConfig& target = out.config();
    draft_options.checks = [&](const model::Checkpoint& ck) {
      if (!ck.format().has(model::Capability::kDraftModel)) {
        throw InputError(ck.root() +
                         ": --draft-model-path needs a draft checkpoint (format draft), got format " +
                         std::string(ck.format().name()));
      }
      model::engine::check_draft_fits(ck.config(), ck.root(), target);
    };
    out.draft.preflight.emplace(model::preflight(runtime, layout, draft_options));
    log_planned("draft", out.draft);
  }
  out.plan_seconds = seconds_since(t0);
  return out;
}

void load_planned(dist::Runtime& runtime, const dist::Groups& groups, LoadedModel& model) {
  const int rank = runtime.rank();
  const auto t0 = Clock::now();
  for (auto [what, c] : {std::pair{"model", &model.main}, std::pair{"draft", &model.draft}}) {
    if (!*c) continue;
    c->result.emplace(model::load_slice(runtime, *c->preflight, [&](const model::LoadProgress& p) {
      if (rank == 0) {
        spdlog::info("{}/{} shards, {:.3f} GiB, {:.2f} GB/s", p.files_done, p.files_total,
                     gib(static_cast<double>(p.bytes_done)),
                     p.seconds > 0 ? p.bytes_done / p.seconds / 1e9 : 0.0);
      }
    }));
    log_loaded_representations(what, *c);
    log_load_summary(groups, c == &model.draft ? "draft: " : "", *c);
  }
  model.load_seconds = seconds_since(t0);
}

LoadedModel load_model(dist::Runtime& runtime, const dist::Groups& groups,
                       const K3evalOptions& options) {
  LoadedModel model = plan_model(runtime, groups, options);
  load_planned(runtime, groups, model);
  return model;
}

}  // namespace k3::apps
