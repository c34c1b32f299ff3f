// model::DType: how one stored tensor encodes its elements, across safetensors dtypes and ggml
// block types. The weight types among them map onto quant::Type for the kernels.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "quant/types.h"

namespace k3::model {

enum class DType : std::uint8_t {
  kF64,
  kF32,
  kF16,
  kBF16,
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
  kQ8_0,
  kQ4_0,
  kQ2_K,
  kQ3_K,
  kMXFP4,  // ggml blocks
};

std::string_view dtype_name(DType type);  // safetensors / ggml spelling: "BF16", "Q4_0", ...
std::optional<DType> dtype_from_safetensors(std::string_view name);
std::optional<DType> dtype_from_ggml(int ggml_type);
int ggml_type_of(DType type);                          // -1 when GGUF has no such type
std::optional<quant::Type> quant_type_of(DType type);  // the kernel type for weight dtypes
bool is_block_type(DType type);

// Elements per block along the last dimension and bytes per block (1 and the element size for
// plain types).
struct DTypeBlock {
  std::int64_t elems;
  std::uint64_t bytes;
};
DTypeBlock dtype_block(DType type);

// Bytes of a tensor of `shape` (row-major, last dimension fastest). Block types need the last
// dimension to be a multiple of the block. Returns nullopt on overflow or a broken block rule,
// so callers that read the shape from a file can report it.
std::optional<std::uint64_t> tensor_bytes(DType type, std::span<const std::int64_t> shape);

std::string shape_string(std::span<const std::int64_t> shape);  // "[4096, 7168]"

}  // namespace k3::model
