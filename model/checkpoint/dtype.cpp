#include "model/checkpoint/dtype.h"

#include <array>

namespace k3::model {

namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  int ggml;             // ggml_type id, -1 if none
  std::uint32_t block;  // elements per block along the last dimension
  std::uint32_t bytes;  // bytes per block
};

// ggml type ids: enum ggml_type in ggml/include/ggml.h (llama.cpp).
constexpr std::array<DTypeInfo, 15> kInfo = {{
    {DType::kF64, "F64", 28, 1, 8},
    {DType::kF32, "F32", 0, 1, 4},
    {DType::kF16, "F16", 1, 1, 2},
    {DType::kBF16, "BF16", 30, 1, 2},
    {DType::kI64, "I64", 27, 1, 8},
    {DType::kI32, "I32", 26, 1, 4},
    {DType::kI16, "I16", 25, 1, 2},
    {DType::kI8, "I8", 24, 1, 1},
    {DType::kU8, "U8", -1, 1, 1},
    {DType::kBool, "BOOL", -1, 1, 1},
    {DType::kQ8_0, "Q8_0", 8, 32, 34},
    {DType::kQ4_0, "Q4_0", 2, 32, 18},
    {DType::kQ2_K, "Q2_K", 10, 256, 84},
    {DType::kQ3_K, "Q3_K", 11, 256, 110},
    {DType::kMXFP4, "MXFP4", 39, 32, 17},
}};

const DTypeInfo& info(DType type) { return kInfo[static_cast<std::size_t>(type)]; }

}  // namespace

std::string_view dtype_name(DType type) { return info(type).name; }

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (const auto& i : kInfo) {
    if (i.block == 1 && i.name == name) return i.type;
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_ggml(int ggml_type) {
  for (const auto& i : kInfo) {
    if (i.ggml == ggml_type) return i.type;
  }
  return std::nullopt;
}

int ggml_type_of(DType type) { return info(type).ggml; }

bool is_block_type(DType type) { return info(type).block > 1; }

DTypeBlock dtype_block(DType type) { return {info(type).block, info(type).bytes}; }

std::optional<quant::Type> quant_type_of(DType type) {
  switch (type) {
    case DType::kF32:
      return quant::Type::kF32;
    case DType::kF16:
      return quant::Type::kF16;
    case DType::kBF16:
      return quant::Type::kBF16;
    case DType::kQ8_0:
      return quant::Type::kQ8_0;
    case DType::kQ4_0:
      return quant::Type::kQ4_0;
    case DType::kQ2_K:
      return quant::Type::kQ2_K;
    case DType::kQ3_K:
      return quant::Type::kQ3_K;
    case DType::kMXFP4:
      return quant::Type::kMXFP4;
    default:
      return std::nullopt;
  }
}

std::optional<std::uint64_t> tensor_bytes(DType type, std::span<const std::int64_t> shape) {
  const DTypeInfo& i = info(type);
  constexpr std::uint64_t kLimit = std::uint64_t{1} << 62;  // far beyond any real file
  std::uint64_t elements = 1;
  for (std::int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (__builtin_mul_overflow(elements, static_cast<std::uint64_t>(d), &elements)) {
      return std::nullopt;
    }
    if (elements > kLimit) return std::nullopt;
  }
  const std::int64_t last = shape.empty() ? 1 : shape.back();
  if (last % i.block != 0) return std::nullopt;
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(elements / i.block, std::uint64_t{i.bytes}, &bytes) ||
      bytes > kLimit) {
    return std::nullopt;
  }
  return bytes;
}

std::string shape_string(std::span<const std::int64_t> shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

}  // namespace k3::model
