// Every rank plans, loads and audits its slice of --model-path (and of --draft-model-path): the
// step --load-only, `logits` and the evaluation share. A wrong checkpoint is reported once, by
// the lowest failing rank, before any tensor data is read.
#pragma once

#include <cstdint>
#include <optional>

#include "apps/k3eval/options.h"
#include "dist/groups.h"
#include "dist/runtime.h"
#include "model/binding.h"
#include "model/checkpoint.h"
#include "model/load_plan.h"
#include "model/loader.h"

namespace k3::apps {

struct LoadedCheckpoint {
  std::optional<model::Checkpoint> checkpoint;
  model::BindResult bound;
  std::optional<model::LoadPlan> plan;
  std::optional<model::LoadResult> result;
};

struct LoadedModel {
  LoadedCheckpoint main, draft;
  double plan_seconds = 0;
  const model::ModelConfig& config() const { return main.checkpoint->config(); }
  const model::WeightStore& weights() const { return main.result->weights; }
};

// Collective over the world.
LoadedModel load_model(dist::Runtime& runtime, const dist::Groups& groups,
                       const K3evalOptions& options);

// Bytes in GiB, for the figures the job prints.
double gib(double bytes);

// This process's peak resident memory.
std::uint64_t peak_rss_bytes();

}  // namespace k3::apps
