#include "apps/k3eval/load_only.h"

#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "apps/k3eval/model_loading.h"
#include "dist/collectives.h"

namespace k3::apps {

namespace {}  // namespace

int run_load_only(dist::Runtime& runtime, const dist::Groups& groups,
                  const K3evalOptions& options) {
  LoadedModel model = load_model(runtime, groups, options);
  LoadedCheckpoint& main_model = model.main;
  LoadedCheckpoint& draft = model.draft;
  const std::uint64_t draft_bytes = draft.result ? draft.result->stats.bytes_read : 0;
  const double seconds = main_model.result->stats.total_seconds +
                         (draft.result ? draft.result->stats.total_seconds : 0.0);
  const auto bytes = dist::allgather(groups.world(), main_model.result->stats.bytes_read);
  const auto drafts = dist::allgather(groups.world(), draft_bytes);
  const auto rss = dist::allgather(groups.world(), peak_rss_bytes());
  const auto secs = dist::allgather(groups.world(), seconds);
  const auto files =
      dist::allgather(groups.world(), static_cast<std::uint64_t>(main_model.result->stats.files));
  if (runtime.rank() == 0) {
    std::uint64_t total = 0;
    double slowest = 0;
    for (int r = 0; r < runtime.world_size(); ++r) {
      total += bytes[r] + drafts[r];
      slowest = std::max(slowest, secs[r]);
      std::printf(
          "rank %3d: %10.3f MiB read from %3llu shard(s)%s, peak RSS %8.1f MiB, load %.3f s\n", r,
          bytes[r] / double(1 << 20), static_cast<unsigned long long>(files[r]),
          draft.checkpoint ? fmt::format(" + draft {:.3f} MiB", drafts[r] / double(1 << 20)).c_str()
                           : "",
          rss[r] / double(1 << 20), secs[r]);
    }
    const std::size_t shards = main_model.checkpoint->files().size();
    std::printf(
        "%zu/%zu shards loaded in %.2f s (slowest rank), %.3f GiB over %d ranks; audit clean on "
        "every rank\n",
        shards, shards, slowest, gib(total), runtime.world_size());
    if (draft.checkpoint) {
      std::printf("draft %s: %zu tensors beside the model, audit clean\n",
                  options.draft_model_path.c_str(), draft.checkpoint->tensors().size());
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace k3::apps
