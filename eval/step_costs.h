// eval::StepCostsCache: adaptive speculation's calibrated step costs (model/engine/speculation.h,
// StepCostModel), kept in the artifacts directory for the next run of the same job.
//
// Calibrating measures a dozen target steps and drafter calls before the warm-up: on the 8-rank
// quickstart 0.3-0.45 s of a 7 s run, on a large model seconds. The costs depend on the binary,
// the host and the job (layout, model, draft, every option), so a run whose key is the one the
// file holds restores them instead of measuring again; any other key measures and replaces the
// file. Real steps refine the restored curves as they refine freshly measured ones (the ratio of
// measured to calibrated time near each point), so a host that has since become busier or idler
// moves the predictions within a few steps. `--speculative-recalibrate` measures anyway.
//
// The file, speculation-costs.json:
//   {"key": "...", "measured": "2026-12-08T00:12:03Z", "target": [[rows, seconds], ...],
//    "draft": [[requests, seconds], ...], "projection": [[rows, seconds], ...]}
// A file that cannot be read or parsed is not the job's input but its own cache: a warning names
// it and the costs are measured again.
#pragma once

#include <filesystem>
#include <string>

#include "dist/groups.h"
#include "model/engine/speculation.h"

namespace k3::eval {

struct StepCostsCache {
  std::filesystem::path file;  // empty: no cache (no artifacts directory)
  std::string key;             // everything the costs depend on; rank 0's
  bool recalibrate = false;    // measure even when the file holds this key's costs
};

// Collective over the world: rank 0 reads cache.file and, when it holds cache.key's costs,
// every rank restores them into `cost`. Returns whether it did (the same on every rank).
bool restore_step_costs(const dist::Groups& groups, const StepCostsCache& cache,
                        model::engine::StepCostModel& cost);

// Rank 0: writes the calibration of `cost` under cache.key, atomically (no file: nothing).
void store_step_costs(const StepCostsCache& cache, const model::engine::StepCostModel& cost);

}  // namespace k3::eval
