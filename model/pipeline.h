// model::pipeline: the one place that chains a checkpoint's stages for a parallel layout:
// open (discover, read headers), bind, plan every rank; then load and audit each rank's slice.
//
// plan_job() runs the stages in one process (k3ckpt plan, the reference). preflight() is the
// same for a job: each file header is read once, by one rank (file f by rank f mod world size);
// the headers reach the planning rank (rank 0) as binary tensor records; it binds and plans
// every rank once and sends each rank only its own plan. Every data-free check covers the whole
// checkpoint before any tensor data is read, and a problem is reported once, by one rank.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dist/layout.h"
#include "dist/runtime.h"
#include "model/binding.h"
#include "model/checkpoint.h"
#include "model/load_plan.h"
#include "model/loader.h"

namespace k3::model {

// Bound for `layout`. InputError "<root>: N problem(s) found before reading any tensor data:" and
// the first 20 problems when a data-free check fails.
BindResult bind_for_layout(const Checkpoint& checkpoint, const dist::Layout& layout);

struct JobPlan {
  Checkpoint checkpoint;
  BindResult bound;
};

// Opens and binds in this process. `checks` run on the opened checkpoint before binding, then
// the tokenizer is checked (open_tokenizer with the config; not for a draft).
JobPlan plan_job(const std::filesystem::path& path, std::optional<FormatKind> load_format,
                 const dist::Layout& layout,
                 const std::function<void(const Checkpoint&)>& checks = {});

// Plans, loads and audits one rank of `layout` in this process (the reference loads rank 0 of a
// one-rank layout). InputError listing the audit's problems.
LoadResult load_rank(const JobPlan& job, const dist::Layout& layout, int rank);

// Whole-checkpoint figures, known on every rank after preflight().
struct CheckpointFigures {
  std::uint64_t files = 0;
  std::uint64_t tensors = 0;
  std::uint64_t bytes = 0;
};

// What a rank reads, as planned.
struct RankShare {
  std::uint64_t bytes = 0;
  std::uint64_t files = 0;
};
RankShare share_of(const LoadPlan& plan);

struct PreflightOptions {
  std::filesystem::path path;
  std::optional<FormatKind> load_format;
  // Run by the planning rank on the indexed checkpoint before binding (e.g. "a draft is where a
  // draft belongs"); an InputError from it is the job's report.
  std::function<void(const Checkpoint&)> checks;
};

struct Preflight {
  // A view on every rank (format, config, files): the tensor index lived on the planning rank
  // only while it planned.
  std::optional<Checkpoint> checkpoint;
  LoadPlan plan;  // this rank's
  CheckpointFigures figures;
  double seconds = 0;  // this rank's time in preflight()
};

// Collective over runtime.world(), whose size must be layout.world(). Throws dist::ReportedError
// on every rank after a problem was reported.
Preflight preflight(dist::Runtime& runtime, const dist::Layout& layout,
                    const PreflightOptions& options);

// Collective: loads this rank's plan and audits it; an audit problem is reported once.
LoadResult load_slice(dist::Runtime& runtime, const Preflight& preflight,
                      const ProgressFn& progress = {});

}  // namespace k3::model
