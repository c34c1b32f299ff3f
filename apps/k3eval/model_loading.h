// The checkpoint half of every mode: model::preflight() plans --model-path (and
// --draft-model-path) once for the job, then each rank loads and audits its slice. A wrong
// checkpoint is reported once, before any tensor data is read.
#pragma once

#include <cstdint>
#include <optional>

#include "apps/k3eval/options.h"
#include "dist/groups.h"
#include "dist/runtime.h"
#include "model/load/preflight.h"

namespace k3::apps {

struct LoadedCheckpoint {
  std::optional<model::Preflight> preflight;
  std::optional<model::LoadResult> result;
  std::size_t shards_loaded = 0;  // files any rank read, after load_planned()
  explicit operator bool() const { return preflight.has_value(); }
  const model::Checkpoint& checkpoint() const { return *preflight->checkpoint; }
};

struct LoadedModel {
  LoadedCheckpoint main, draft;
  double plan_seconds = 0;  // preflight of both, on this rank
  double load_seconds = 0;  // load and audit of both, on this rank
  const model::ModelConfig& config() const { return main.checkpoint().config(); }
  const model::WeightStore& weights() const { return main.result->weights; }
};

// Collective over the world: preflight only (no tensor data read).
LoadedModel plan_model(dist::Runtime& runtime, const dist::Groups& groups,
                       const K3evalOptions& options);

// Collective: loads and audits what plan_model() planned, each rank logging what it loaded
// through which capability, rank 0 the production line "N/N shards loaded in T s (slowest
// rank), G GiB over R ranks".
void load_planned(dist::Runtime& runtime, const dist::Groups& groups, LoadedModel& model);

// plan_model, then load_planned.
LoadedModel load_model(dist::Runtime& runtime, const dist::Groups& groups,
                       const K3evalOptions& options);

// Bytes in GiB and MiB, for the figures the job prints.
double gib(double bytes);
double mib(double bytes);

// This process's peak resident memory.
std::uint64_t peak_rss_bytes();

}  // namespace k3::apps
