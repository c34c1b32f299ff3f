// Mutants: synthetic checkpoints with one planted error, for proving that the project's
// regression checks can fail (docs/ENGINE.md, "Mutation score"). A mutant changes one block's
// logical weights before any format encodes them (so it exists in every format alike), or one
// stored encoding after a format has written it (a ModelSlim scale, a GGUF block's scale).
// k3ckpt synth --mutant NAME[=AMOUNT] writes one; k3ckpt mutants lists them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/checkpoint/dtype.h"
#include "model/checkpoint/format.h"
#include "model/config.h"

namespace k3::model {

// One entry of the catalog. `amount` is the size of the error: a relative scale for the
// projections, scales and decay (0.2 = 20 % too large), an absolute shift for the router bias;
// the sign flip and the expert swap take none (0).
struct MutantInfo {
  std::string_view name;
  std::string_view what;  // for listings: which tensor, changed how
  double default_amount = 0.0;
  std::vector<FormatKind> formats;  // where it applies
};

const std::vector<MutantInfo>& mutant_catalog();
// UsageError naming every mutant when `name` is none of them.
const MutantInfo& find_mutant(std::string_view name);

// A mutant chosen for one checkpoint: SynthOptions::mutant.
struct Mutation {
  std::string name;
  std::optional<double> amount;  // the catalog's default when unset
};

namespace synth {

// A mutation resolved against the checkpoint's config and format: which logical or stored
// tensor it changes, and how. Inactive (changes nothing) without a mutation.
class MutationEffect {
 public:
  MutationEffect() = default;
  // UsageError when the mutant does not apply to `format` or the amount is out of its range.
  MutationEffect(const Mutation& mutation, const ModelConfig& config, FormatKind format);

  // Where element `first` of `logical` is drawn from: the expert swap draws one expert's
  // slice from the other's place.
  std::size_t source_index(const std::string& logical, const std::vector<std::int64_t>& shape,
                           std::size_t first, std::size_t count) const;
  // Changes the drawn logical values (elements [first, first + values.size()) of `logical`).
  void on_logical(const std::string& logical, const std::vector<std::int64_t>& shape,
                  std::size_t first, std::vector<float>& values) const;
  // Changes the config the checkpoint is written with (the draft's rotary base).
  void on_config(ModelConfig& config) const;
  // Changes a stored tensor's encoded bytes.
  void on_stored(const std::string& stored, DType dtype, std::vector<std::uint8_t>& bytes) const;

  bool active() const { return kind_ != Kind::kNone; }
  // Whether any tensor was changed: a mutant whose tensor the format never wrote is an error,
  // not a mutant that no check catches.
  bool applied() const { return applied_; }

 private:
  enum class Kind { kNone, kScale, kScaleExpert, kNegate, kShiftElement, kLogShift, kSwapExperts,
                    kStoredScale, kBlockScale, kRopeBase };
  Kind kind_ = Kind::kNone;
  std::vector<std::string> logical_;  // the logical tensors it changes
  std::string stored_;                // the stored tensor (kStoredScale, kBlockScale)
  double amount_ = 0.0;
  std::int64_t element_ = 0;  // kShiftElement: which element; kScaleExpert, kSwapExperts: expert a
  std::int64_t other_ = 1;    // kSwapExperts: expert b
  std::size_t expert_size_ = 0;  // kScaleExpert: elements of one expert's matrix
  mutable bool applied_ = false;
};

}  // namespace synth
}  // namespace k3::model
