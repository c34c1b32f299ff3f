// model::pipeline: a checkpoint's stages for a parallel layout, chained in one process: open
// (discover, read headers), bind, plan every rank; then load and audit a rank's slice.
//
// plan_job() is k3ckpt plan's and the reference's path; the job's planning rank runs the same
// binding and planning (check_tokenizer, bind_for_layout, encode_plans) inside preflight()
// (model/load/preflight.h), which spreads the header reading over the ranks. No MPI here.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dist/layout.h"
#include "model/load/binding.h"
#include "model/checkpoint/checkpoint.h"
#include "model/load/load_plan.h"
#include "model/load/loader.h"

namespace k3::model {

// The tokenizer is part of a main-model checkpoint: it must parse and its ids must fit
// vocab_size before any tensor data is read (a draft uses its target's).
void check_tokenizer(const std::filesystem::path& path, const Checkpoint& checkpoint);

// "N <what>:" and the first 20 problems, one per line.
std::string problems_text(const std::string& what, const std::vector<std::string>& problems);

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

// Loads `plan` and audits what was loaded against it. InputError listing the audit's problems.
LoadResult load_audited(const Checkpoint& checkpoint, const LoadPlan& plan,
                        const ProgressFn& progress = {});

// Plans, loads and audits one rank of `layout` in this process (the reference loads rank 0 of a
// one-rank layout).
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

CheckpointFigures figures_of(const Checkpoint& checkpoint);

// Every rank's plan, encoded (model/load/wire.h), in rank order, computed on this node's cores
// (common/fan_out.h): the planning rank runs this while every other rank waits for it.
std::vector<std::string> encode_plans(const Checkpoint& checkpoint, const BindResult& bound,
                                      const dist::Layout& layout);


}  // namespace k3::model
