#include "apps/k3eval/load_only.h"

#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "apps/k3eval/model_loading.h"
#include "dist/collectives.h"

namespace k3::apps {

namespace {

// Every rank's value of `mine`, on every rank.
template <class T>
std::vector<T> from_every_rank(const dist::Groups& groups, T mine) {
  return dist::allgather(groups.world(), mine);
}

}  // namespace

int run_plan_only(dist::Runtime& runtime, const dist::Groups& groups,
                  const K3evalOptions& options) {
  const LoadedModel model = plan_model(runtime, groups, options);
  const model::RankShare main_share = model::share_of(model.main.preflight->plan);
  const std::uint64_t draft_bytes = model.draft ? model.draft.preflight->plan.bytes : 0;
  const auto bytes = from_every_rank(groups, main_share.bytes);
  const auto files = from_every_rank(groups, main_share.files);
  const auto drafts = from_every_rank(groups, draft_bytes);
  const auto rss = from_every_rank(groups, peak_rss_bytes());
  const auto secs = from_every_rank(groups, model.plan_seconds);
  if (runtime.rank() == 0) {
    const model::Checkpoint& ck = model.main.checkpoint();
    const model::CheckpointFigures& f = model.main.preflight->figures;
    std::printf("layout: %s\n", groups.layout().summary().c_str());
    std::printf("checkpoint: %s\nformat: %s (%s)\n", ck.root().c_str(),
                std::string(ck.format().name()).c_str(), ck.format().capability_list().c_str());
    std::uint64_t total = 0, peak = 0;
    double slowest = 0;
    for (int r = 0; r < runtime.world_size(); ++r) {
      total += bytes[r] + drafts[r];
      peak = std::max(peak, rss[r]);
      slowest = std::max(slowest, secs[r]);
      std::printf("rank %3d: %10.3f MiB to read from %3llu shard(s)%s, peak RSS %8.1f MiB\n", r,
                  mib(static_cast<double>(bytes[r])), static_cast<unsigned long long>(files[r]),
                  model.draft ? fmt::format(" + draft {:.3f} MiB", mib(drafts[r])).c_str() : "",
                  mib(static_cast<double>(rss[r])));
    }
    std::printf(
        "plan-only: %llu shards, %llu tensors, %.3f GiB checked without reading tensor data; "
        "%.3f GiB to read over %d ranks; planned in %.2f s (slowest rank), peak RSS %.1f MiB\n",
        static_cast<unsigned long long>(f.files), static_cast<unsigned long long>(f.tensors),
        gib(static_cast<double>(f.bytes)), gib(static_cast<double>(total)), runtime.world_size(),
        slowest, mib(static_cast<double>(peak)));
    std::fflush(stdout);
  }
  return 0;
}

int run_load_only(dist::Runtime& runtime, const dist::Groups& groups,
                  const K3evalOptions& options) {
  LoadedModel model = load_model(runtime, groups, options);
  const LoadedCheckpoint& main_model = model.main;
  const LoadedCheckpoint& draft = model.draft;
  const std::uint64_t draft_bytes = draft ? draft.result->stats.bytes_read : 0;
  const auto bytes = from_every_rank(groups, main_model.result->stats.bytes_read);
  const auto drafts = from_every_rank(groups, draft_bytes);
  const auto rss = from_every_rank(groups, peak_rss_bytes());
  const auto secs = from_every_rank(groups, model.load_seconds);
  const auto files =
      from_every_rank(groups, static_cast<std::uint64_t>(main_model.result->stats.files));
  if (runtime.rank() == 0) {
    std::uint64_t total = 0;
    double slowest = 0;
    for (int r = 0; r < runtime.world_size(); ++r) {
      total += bytes[r] + drafts[r];
      slowest = std::max(slowest, secs[r]);
      std::printf(
          "rank %3d: %10.3f MiB read from %3llu shard(s)%s, peak RSS %8.1f MiB, load %.3f s\n", r,
          mib(static_cast<double>(bytes[r])), static_cast<unsigned long long>(files[r]),
          draft ? fmt::format(" + draft {:.3f} MiB", mib(drafts[r])).c_str() : "",
          mib(static_cast<double>(rss[r])), secs[r]);
    }
    std::printf(
        "%zu/%zu shards loaded in %.2f s (slowest rank), %.3f GiB over %d ranks; audit clean on "
        "every rank\n",
        main_model.shards_loaded, main_model.checkpoint().files().size(), slowest,
        gib(static_cast<double>(total)), runtime.world_size());
    if (draft) {
      std::printf("draft %s: %llu tensors beside the model, audit clean\n",
                  options.draft_model_path.c_str(),
                  static_cast<unsigned long long>(draft.preflight->figures.tensors));
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace k3::apps
