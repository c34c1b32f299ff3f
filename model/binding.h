// model::Binding: how one logical parameter is stored in one checkpoint, and the representation
// the engine will compute with, chosen by exactly one capability of the checkpoint's format.
//
// bind_parameters() runs every check that needs no tensor data (missing or unexpected tensors,
// dtypes and quantization schemes, shapes against config.json) and reports all problems at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/parameters.h"
#include "quant/types.h"

namespace k3::model {

// One stored tensor (or, per expert, one per expert) that feeds a parameter, and how the
// parameter's logical coordinates map onto it.
struct StoredPart {
  std::string role;                  // weight, k_b, v_b, packed, e8m0, scale, offset, ...
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

// The stored name of a logical parameter in a GGUF file ("blk.3.attn_q_b.weight"). The config
// tells MLA layers (g_proj -> attn_gate) from KDA layers (g_proj -> ssm_g).
std::string gguf_name(const std::string& logical, const ModelConfig& config);

}  // namespace k3::model
