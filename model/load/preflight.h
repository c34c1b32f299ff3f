// model::preflight: the job's pipeline (model/load/pipeline.h) over the ranks: each file header
// is read once, by one rank (file f by rank f mod world size); the headers reach the planning
// rank (rank 0) as binary tensor records; it binds and plans every rank once and sends each rank
// only its own plan. Every data-free check covers the whole checkpoint before any tensor data is
// read, and a problem is reported once, by one rank. Then each rank loads and audits its slice.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>

#include "dist/layout.h"
#include "dist/runtime.h"
#include "model/load/pipeline.h"

namespace k3::model {

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
