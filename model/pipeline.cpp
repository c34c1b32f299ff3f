#include "model/pipeline.h"

#include <chrono>
#include <set>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/wire.h"
#include "dist/collectives.h"
#include "model/parameters.h"
#include "model/wire.h"

namespace k3::model {

namespace {

constexpr int kPlanningRank = 0;

std::string join_problems(const std::string& what, const std::vector<std::string>& problems) {
  std::string text = std::to_string(problems.size()) + " " + what + ":";
  for (std::size_t i = 0; i < problems.size() && i < 20; ++i) text += "\n  " + problems[i];
  if (problems.size() > 20) text += "\n  ... and " + std::to_string(problems.size() - 20) + " more";
  return text;
}

CheckpointFigures figures_of(const Checkpoint& checkpoint) {
  return {checkpoint.files().size(), checkpoint.tensors().size(), checkpoint.tensor_bytes()};
}

void encode(WireWriter& out, const CheckpointFigures& f) {
  out.put(f.files);
  out.put(f.tensors);
  out.put(f.bytes);
}
void decode(WireReader& in, CheckpointFigures& f) {
  in.get(f.files);
  in.get(f.tensors);
  in.get(f.bytes);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

BindResult bind_for_layout(const Checkpoint& checkpoint, const dist::Layout& layout) {
  BindResult bound = bind_parameters(checkpoint, kimi_k3_parameters(checkpoint.config(), layout));
  if (!bound.problems.empty()) {
    throw InputError(
        checkpoint.root() + ": " +
        join_problems("problem(s) found before reading any tensor data", bound.problems));
  }
  return bound;
}

JobPlan plan_job(const std::filesystem::path& path, std::optional<FormatKind> load_format,
                 const dist::Layout& layout, const std::function<void(const Checkpoint&)>& checks) {
  Checkpoint checkpoint = Checkpoint::open(path, load_format);
  if (checks) checks(checkpoint);
  BindResult bound = bind_for_layout(checkpoint, layout);
  return {std::move(checkpoint), std::move(bound)};
}

LoadResult load_rank(const JobPlan& job, const dist::Layout& layout, int rank) {
  const LoadPlan plan = make_load_plan(job.checkpoint, job.bound.bindings, layout, rank);
  LoadResult result = load(job.checkpoint, plan);
  const auto problems = audit(job.checkpoint, plan, result.weights);
  if (!problems.empty())
    throw InputError(join_problems("audit problem(s) after loading", problems));
  return result;
}

RankShare share_of(const LoadPlan& plan) {
  RankShare s;
  s.bytes = plan.bytes;
  s.files = plan.files.size();
  for (const PlannedParam& p : plan.params) s.reads += p.reads.size();
  return s;
}

Preflight preflight(dist::Runtime& runtime, const dist::Layout& layout,
                    const PreflightOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const dist::Comm& world = runtime.world();
  if (world.size() != layout.world()) {
    throw InternalError("preflight: " + std::to_string(world.size()) + " ranks for a layout of " +
                        std::to_string(layout.world()));
  }
  const int rank = world.rank();
  const bool planner = rank == kPlanningRank;
  Preflight out;

  // 1. The planning rank reads the small files; every rank learns the format and the files.
  std::optional<Checkpoint> checkpoint;
  std::string manifest;
  runtime.collectively([&] {
    if (!planner) return;
    checkpoint.emplace(Checkpoint::discover(options.path, options.load_format));
    WireWriter w;
    w.put(checkpoint->root());
    w.put(checkpoint->format().kind());
    w.put(checkpoint->files());
    manifest = w.take();
  });
  dist::bcast(world, manifest, kPlanningRank);
  const double t_discover = seconds_since(t0);
  WireReader m(manifest);
  const auto root = m.get<std::string>();
  const auto kind = m.get<FormatKind>();
  const auto files = m.get<std::vector<std::string>>();

  // 2. Each header once: file f by rank f mod world size, sent as binary tensor records. The
  // planning rank keeps its own files' headers (GGUF's metadata is in file 0, which is its).
  std::vector<ShardHeader> headers(planner ? files.size() : 0);
  WireWriter sent;
  runtime.collectively([&] {
    const Checkpoint reader = Checkpoint::view(root, kind, {}, files, "");
    for (std::size_t f = static_cast<std::size_t>(rank); f < files.size();
         f += static_cast<std::size_t>(world.size())) {
      ShardHeader h = reader.read_shard_header(f);
      if (planner) {
        headers[f] = std::move(h);
      } else {
        sent.put(static_cast<std::uint64_t>(f));
        sent.put(h.tensors);
      }
    }
  });
  {
    const std::string bytes = sent.take();
    const auto gathered =
        dist::gatherv(world, std::span<const char>(bytes.data(), bytes.size()), kPlanningRank);
    if (planner) {
      WireReader in(std::string_view(gathered.data.data(), gathered.data.size()));
      while (!in.done()) {
        const auto f = in.get<std::uint64_t>();
        if (f >= headers.size()) throw InternalError("preflight: a header of no file arrived");
        in.get(headers[f].tensors);
      }
    }
  }

  const double t_headers = seconds_since(t0);

  // 3. One binding and every rank's plan, on the planning rank only.
  WireWriter plans;
  std::vector<int> counts;
  std::string shared;
  runtime.collectively([&] {
    if (!planner) return;
    checkpoint->add_headers(std::move(headers));
    const double t_index = seconds_since(t0);
    if (options.checks) options.checks(*checkpoint);
    const BindResult bound = bind_for_layout(*checkpoint, layout);
    const double t_bind = seconds_since(t0);
    for (int r = 0; r < world.size(); ++r) {
      const std::size_t before = plans.bytes().size();
      encode(plans, make_load_plan(*checkpoint, bound.bindings, layout, r));
      // Plans of one layout are alike in size: one allocation for all of them.
      if (r == 0) plans.reserve(plans.bytes().size() * (world.size() + world.size() / 8 + 1));
      counts.push_back(dist::checked_count(plans.bytes().size() - before, "a load plan"));
    }
    WireWriter s;
    encode(s, checkpoint->config());
    s.put(checkpoint->name_prefix());
    encode(s, figures_of(*checkpoint));
    shared = s.take();
    spdlog::debug(
        "preflight: discovered {:.2f} s, headers read and gathered {:.2f} s, indexed {:.2f} s, "
        "bound {:.2f} s, planned {} ranks {:.2f} s ({:.1f} MiB of plans)",
        t_discover, t_headers - t_discover, t_index - t_headers, t_bind - t_index, world.size(),
        seconds_since(t0) - t_bind, plans.bytes().size() / double(1 << 20));
  });
  dist::bcast(world, shared, kPlanningRank);
  const std::string all_plans = plans.take();
  const auto mine = dist::scatterv(world, std::span<const char>(all_plans.data(), all_plans.size()),
                                   counts, kPlanningRank);
  out.plan = from_wire<LoadPlan>(std::string_view(mine.data(), mine.size()));
  WireReader s(shared);
  ModelConfig config;
  decode(s, config);
  const auto prefix = s.get<std::string>();
  decode(s, out.figures);
  // The planning rank lets its index go too: a long evaluation keeps only what loading needs.
  checkpoint.reset();
  out.checkpoint = Checkpoint::view(root, kind, std::move(config), files, prefix);
  out.seconds = seconds_since(t0);
  return out;
}

LoadResult load_slice(dist::Runtime& runtime, const Preflight& preflight,
                      const ProgressFn& progress) {
  std::optional<LoadResult> result;
  runtime.collectively([&] {
    result.emplace(load(*preflight.checkpoint, preflight.plan, progress));
    const auto problems = audit(*preflight.checkpoint, preflight.plan, result->weights);
    if (!problems.empty())
      throw InputError(join_problems("audit problem(s) after loading", problems));
  });
  return std::move(*result);
}

}  // namespace k3::model
