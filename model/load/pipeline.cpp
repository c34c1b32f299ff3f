#include "model/load/pipeline.h"

#include "common/error.h"
#include "common/fan_out.h"
#include "model/checkpoint/tokenizer_files.h"
#include "model/load/wire.h"
#include "model/parameters.h"

namespace k3::model {

void check_tokenizer(const std::filesystem::path& path, const Checkpoint& checkpoint) {
  if (!checkpoint.format().has(Capability::kDraftModel)) open_tokenizer(path, checkpoint.config());
}

std::string problems_text(const std::string& what, const std::vector<std::string>& problems) {
  std::string text = std::to_string(problems.size()) + " " + what + ":";
  for (std::size_t i = 0; i < problems.size() && i < 20; ++i) text += "\n  " + problems[i];
  if (problems.size() > 20) text += "\n  ... and " + std::to_string(problems.size() - 20) + " more";
  return text;
}

CheckpointFigures figures_of(const Checkpoint& checkpoint) {
  return {checkpoint.files().size(), checkpoint.tensors().size(), checkpoint.tensor_bytes()};
}

std::vector<std::string> encode_plans(const Checkpoint& checkpoint, const BindResult& bound,
                                      const dist::Layout& layout) {
  std::vector<std::string> encoded(static_cast<std::size_t>(layout.world()));
  fan_out(encoded.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t r = begin; r < end; ++r) {
      encoded[r] = to_wire(make_load_plan(checkpoint, bound.bindings, layout, static_cast<int>(r)));
    }
  });
  return encoded;
}

BindResult bind_for_layout(const Checkpoint& checkpoint, const dist::Layout& layout) {
  BindResult bound = bind_parameters(checkpoint, kimi_k3_parameters(checkpoint.config(), layout));
  if (!bound.problems.empty()) {
    throw InputError(
        checkpoint.root() + ": " +
        problems_text("problem(s) found before reading any tensor data", bound.problems));
  }
  return bound;
}

JobPlan plan_job(const std::filesystem::path& path, std::optional<FormatKind> load_format,
                 const dist::Layout& layout, const std::function<void(const Checkpoint&)>& checks) {
  Checkpoint checkpoint = Checkpoint::open(path, load_format);
  if (checks) checks(checkpoint);
  check_tokenizer(path, checkpoint);
  BindResult bound = bind_for_layout(checkpoint, layout);
  return {std::move(checkpoint), std::move(bound)};
}

LoadResult load_audited(const Checkpoint& checkpoint, const LoadPlan& plan,
                        const ProgressFn& progress) {
  LoadResult result = load(checkpoint, plan, progress);
  const auto problems = audit(checkpoint, plan, result.weights);
  if (!problems.empty())
    throw InputError(problems_text("audit problem(s) after loading", problems));
  return result;
}

LoadResult load_rank(const JobPlan& job, const dist::Layout& layout, int rank) {
  return load_audited(job.checkpoint,
                      make_load_plan(job.checkpoint, job.bound.bindings, layout, rank));
}

RankShare share_of(const LoadPlan& plan) {
  RankShare s;
  s.bytes = plan.bytes;
  s.files = plan.files.size();
  return s;
}

}  // namespace k3::model
