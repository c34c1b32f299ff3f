// model::load: executes a LoadPlan (parallel preads of exactly the planned byte ranges, memory
// close to the slice) and turns the bytes into Weights; model::audit proves afterwards that the
// rank holds what the plan promised.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/load/load_plan.h"
#include "model/load/weights.h"

namespace k3::model {

struct LoadProgress {
  std::size_t files_done = 0;
  std::size_t files_total = 0;
  std::uint64_t bytes_done = 0;
  double seconds = 0;
};
// Called from loader threads (never concurrently) each time a file's planned reads complete.
using ProgressFn = std::function<void(const LoadProgress&)>;

struct LoadStats {
  std::uint64_t bytes_read = 0;
  std::size_t files = 0;
  double read_seconds = 0;
  double total_seconds = 0;
};

struct LoadResult {
  WeightStore weights;
  LoadStats stats;
};

LoadResult load(const Checkpoint& checkpoint, const LoadPlan& plan,
                const ProgressFn& progress = {});

// Every planned parameter present exactly once with the planned type and shape, its side
// arrays consistent, and the format rules (split K is Q4_0, split V is Q2_K, ModelSlim kv_b_proj
// is dense). Returns every problem, each naming rank, format, capability, tensor, expected and
// actual; empty when clean.
std::vector<std::string> audit(const Checkpoint& checkpoint, const LoadPlan& plan,
                               const WeightStore& weights);

}  // namespace k3::model
