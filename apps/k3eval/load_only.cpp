#include "apps/k3eval/load_only.h"

#include <sys/resource.h>

#include <chrono>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "dist/collectives.h"
#include "model/binding.h"
#include "model/checkpoint.h"
#include "model/load_plan.h"
#include "model/loader.h"

namespace k3::apps {

namespace {

using Clock = std::chrono::steady_clock;

double gib(double bytes) { return bytes / double(1ull << 30); }

std::uint64_t peak_rss_bytes() {
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

}  // namespace

int run_load_only(dist::Runtime& runtime, const dist::Groups& groups,
                  const K3evalOptions& options) {
  const auto t0 = Clock::now();
  const int rank = runtime.rank();
  std::optional<model::Checkpoint> ck;
  model::BindResult bound;
  std::optional<model::LoadPlan> plan;
  // Everything here reads headers only: a wrong checkpoint fails in seconds, reported once.
  runtime.collectively([&] {
    std::optional<model::FormatKind> format;
    if (options.load_format != "auto") {
      format = model::format_from_name(options.load_format);
      if (!format) {
        throw UsageError("--load-format '" + options.load_format +
                         "' is not one of auto, hf, modelslim, gguf, draft");
      }
    }
    ck.emplace(model::Checkpoint::open(options.model_path, format));
    const auto specs = model::kimi_k3_parameters(ck->config(), groups.layout());
    bound = model::bind_parameters(*ck, specs);
    if (!bound.problems.empty()) {
      throw InputError(
          options.model_path + ": " +
          join_problems("problem(s) found before reading any tensor data", bound.problems));
    }
    plan.emplace(model::make_load_plan(*ck, bound.bindings, groups.layout(), rank));
  });
  const double plan_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  spdlog::info("{}: format {} ({}), {} files, {:.3f} GiB; planned in {:.2f} s", options.model_path,
               ck->format().name(), ck->format().capability_list(), ck->files().size(),
               gib(ck->tensor_bytes()), plan_seconds);
  spdlog::info("rank 0 reads {:.3f} GiB from {} of {} files", gib(plan->bytes), plan->files.size(),
               ck->files().size());

  std::optional<model::LoadResult> loaded;
  runtime.collectively([&] {
    loaded.emplace(model::load(*ck, *plan, [&](const model::LoadProgress& p) {
      if (rank == 0) {
        spdlog::info("{}/{} shards, {:.3f} GiB, {:.2f} GB/s", p.files_done, p.files_total,
                     gib(p.bytes_done), p.seconds > 0 ? p.bytes_done / p.seconds / 1e9 : 0.0);
      }
    }));
    const auto problems = model::audit(*ck, *plan, loaded->weights);
    if (!problems.empty())
      throw InputError(join_problems("audit problem(s) after loading", problems));
  });
  const double load_seconds = loaded->stats.total_seconds;
  const auto bytes =
      dist::allgather(groups.world(), static_cast<std::uint64_t>(loaded->stats.bytes_read));
  const auto rss = dist::allgather(groups.world(), peak_rss_bytes());
  const auto secs = dist::allgather(groups.world(), load_seconds);
  const auto files =
      dist::allgather(groups.world(), static_cast<std::uint64_t>(loaded->stats.files));
  if (rank == 0) {
    std::uint64_t total = 0, shards = 0;
    double slowest = 0;
    for (int r = 0; r < runtime.world_size(); ++r) {
      total += bytes[r];
      slowest = std::max(slowest, secs[r]);
      shards = std::max(shards, files[r]);
      std::printf(
          "rank %3d: %10.3f MiB read from %3llu shard(s), peak RSS %8.1f MiB, load %.2f s\n", r,
          bytes[r] / double(1 << 20), static_cast<unsigned long long>(files[r]),
          rss[r] / double(1 << 20), secs[r]);
    }
    std::printf(
        "%zu/%zu shards loaded in %.1f s (slowest rank), %.3f GiB over %d ranks; audit clean on "
        "every rank\n",
        ck->files().size(), ck->files().size(), slowest, gib(total), runtime.world_size());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace k3::apps
