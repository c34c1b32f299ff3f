// model::Binding: how one logical parameter is stored in one checkpoint, and the representation
// the engine will compute with, chosen by exactly one capability of the checkpoint's format.
//
// bind_parameters() runs every check that needs no tensor data (missing or unexpected tensors,
// dtypes and quantization schemes, shapes against config.json) and reports all problems at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/checkpoint/checkpoint.h"
#include "model/parameters.h"
#include "quant/types.h"

namespace k3::model {

// What a stored part is to its parameter: the loader assembles a Weight from its parts by role.
enum class PartRole : std::uint8_t {
  kWeight,       // the tensor itself, as stored (matrix, vector, ggml blocks, ModelSlim int8)
  kPacked,       // compressed-tensors MXFP4 nibbles (weight_packed)
  kE8m0,         // their E8M0 scale per 32 columns (weight_scale)
  kScale,        // ModelSlim per-row scale
  kOffset,       // ModelSlim per-row offset
  kGroupScale,   // ModelSlim W4A8 per-group scale
  kGroupOffset,  // ModelSlim W4A8 per-group offset
  kSplitK,       // GGUF split MLA kv_b: K [heads, kv_lora, nope]
  kSplitV,       // GGUF split MLA kv_b: V [heads, v, kv_lora]
  kScore,        // AttnRes score stored folded
  kScoreNorm,    // AttnRes norm weight, folded with kScoreProj at load
  kScoreProj,    // AttnRes projection
  kSsmA,         // KDA decay stored as -exp(A_log) (GGUF ssm_a)
  kALog,         // KDA A_log, exponentiated at load
};
// The role's short name in messages and plans ("weight", "k_b", "e8m0", ...).
std::string_view part_role_name(PartRole role);

// One stored tensor (or, per expert, one per expert) that feeds a parameter, and how the
// parameter's logical coordinates map onto it.
struct StoredPart {
  PartRole role = PartRole::kWeight;
  std::vector<std::string> tensors;  // one name, or one per expert (index = expert id)
  DType dtype = DType::kBF16;
  std::vector<std::int64_t> shape;  // stored shape (of one expert for per-expert parts)
  // Mapping from the logical slice box to the stored one:
  std::int64_t row_div = 1;  // logical rows per stored row (int4 packed along rows: 2;
                             // split K/V: rows of one head)
  std::int64_t col_div = 1;  // logical columns per stored column (nibbles 2, E8M0 32)
  bool col_whole = false;    // stored has one column whatever the slice ([N, 1] scales)
  // The index entries of `tensors`, resolved once when binding ends (the planner reads them for
  // every rank of the layout).
  std::vector<const StoredTensor*> stored;
  bool per_expert() const { return tensors.size() > 1; }
};

struct Representation {
  quant::Type type = quant::Type::kF32;  // what the kernels compute with
  std::string text;                      // "split K Q4_0 + V Q2_K", "dense BF16", ...
  std::optional<Capability> asked;       // the capability that decided, if any
  bool answer = false;                   // its value for this format
};

struct Binding {
  ParamSpec spec;
  Representation repr;
  std::vector<StoredPart> parts;
};

struct BindResult {
  std::vector<Binding> bindings;
  std::vector<std::string> problems;  // every data-free problem found; empty when clean
  std::vector<std::string> ignored;   // stored tensors outside the language model (vision tower)
};

// Binds every parameter of `specs` to `checkpoint`. Never throws for checkpoint problems: they
// are collected in `problems`, each naming the format, capability, tensor, expected and actual.
BindResult bind_parameters(const Checkpoint& checkpoint, const std::vector<ParamSpec>& specs);

}  // namespace k3::model
