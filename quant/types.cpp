#include "quant/types.h"

#include <array>
#include <limits>

#include "common/error.h"
#include "quant/blocks.h"
#include "quant/reference.h"
#include "quant/repack.h"

namespace k3::quant {
namespace {

using detail::from_float_row;
using detail::to_float_row;

// Block sizes come from the block structs (quant/blocks.h); no other code spells them.
constexpr std::array<TypeTraits, kTypeCount> kTraits = {{
    {Type::kF32, "F32", 1, 4, 1, false, ActFormat::kF32, 0, to_float_row<Type::kF32>,
     from_float_row<Type::kF32>},
    {Type::kF16, "F16", 1, 2, 1, false, ActFormat::kF32, 1, to_float_row<Type::kF16>,
     from_float_row<Type::kF16>},
    {Type::kBF16, "BF16", 1, 2, 1, false, ActFormat::kF32, 30, to_float_row<Type::kBF16>,
     from_float_row<Type::kBF16>},
    {Type::kQ8_0, "Q8_0", kBlock32, sizeof(BlockQ8_0), kBlock32, true, ActFormat::kQ8Block32, 8,
     to_float_row<Type::kQ8_0>, from_float_row<Type::kQ8_0>},
    {Type::kQ4_0, "Q4_0", kBlock32, sizeof(BlockQ4_0), kBlock32, true, ActFormat::kQ8Block32, 2,
     to_float_row<Type::kQ4_0>, from_float_row<Type::kQ4_0>},
    {Type::kQ2_K, "Q2_K", kBlockK, sizeof(BlockQ2_K), kBlockK, true, ActFormat::kQ8K, 10,
     to_float_row<Type::kQ2_K>, from_float_row<Type::kQ2_K>},
    {Type::kQ3_K, "Q3_K", kBlockK, sizeof(BlockQ3_K), kBlockK, true, ActFormat::kQ8K, 11,
     to_float_row<Type::kQ3_K>, from_float_row<Type::kQ3_K>},
    {Type::kMXFP4, "MXFP4", kBlock32, sizeof(BlockMXFP4), kBlock32, true, ActFormat::kQ8Block32, 39,
     to_float_row<Type::kMXFP4>, from_float_row<Type::kMXFP4>},
    // compressed-tensors MXFP4: 16 bytes of codes per 32 elements, the E8M0 scales apart.
    {Type::kMXFP4Packed, "CT_MXFP4", kBlock32, kBlock32 / 2, kBlock32, true,
     ActFormat::kQ8Block32EvenOdd, -1, nullptr, nullptr},
    {Type::kModelSlimInt8, "MS_INT8", 1, 1, kBlock32, true, ActFormat::kQ8Block32Sums, -1, nullptr,
     nullptr},
    {Type::kModelSlimInt4, "MS_INT4", 2, 1, kBlock32, true, ActFormat::kQ8Block32Sums, -1, nullptr,
     nullptr},
}};
// The table is indexed by the enum.
static_assert([] {
  for (std::size_t i = 0; i < kTraits.size(); ++i) {
    if (static_cast<std::size_t>(kTraits[i].type) != i) return false;
  }
  return true;
}());

std::size_t checked_mul(std::size_t a, std::size_t b, Type type, std::size_t rows,
                        std::size_t cols) {
  if (a != 0 && b > std::numeric_limits<std::size_t>::max() / a) {
    throw InputError("quant: " + describe(type, rows, cols) + ": byte size overflows");
  }
  return a * b;
}

void check_span(const MatrixView& v, std::string_view what, std::size_t expected,
                std::size_t actual) {
  if (expected != actual) {
    throw InputError("quant: " + describe(v) + ": " + std::string(what) + " has " +
                     std::to_string(actual) + " elements, expected " + std::to_string(expected));
  }
}

void check_empty(const MatrixView& v, std::string_view what, std::size_t actual) {
  if (actual != 0) {
    throw InputError("quant: " + describe(v) + ": " + std::string(what) + " is not used by " +
                     std::string(name(v.type)) + " but has " + std::to_string(actual) +
                     " elements");
  }
}

}  // namespace

const TypeTraits& traits(Type type) {
  const auto i = static_cast<std::size_t>(type);
  if (i >= kTraits.size()) {
    throw InternalError("quant: unknown weight type id " + std::to_string(i));
  }
  return kTraits[i];
}

std::string_view name(Type type) { return traits(type).name; }

std::optional<Type> type_from_name(std::string_view n) {
  for (const auto& t : kTraits) {
    if (t.name == n) return t.type;
  }
  return std::nullopt;
}

std::optional<Type> type_from_ggml(int ggml_type) {
  for (const auto& t : kTraits) {
    if (t.ggml_type >= 0 && t.ggml_type == ggml_type) return t.type;
  }
  return std::nullopt;
}

std::string_view name(ActFormat format) {
  switch (format) {
    case ActFormat::kF32:
      return "F32";
    case ActFormat::kQ8Block32:
      return "Q8_32";
    case ActFormat::kQ8Block32EvenOdd:
      return "Q8_32_EVEN_ODD";
    case ActFormat::kQ8K:
      return "Q8_K";
    case ActFormat::kQ8Block32Sums:
      return "Q8_32_SUMS";
  }
  return "?";
}

std::string describe(Type type, std::size_t rows, std::size_t cols) {
  return std::string(name(type)) + " [" + std::to_string(rows) + " x " + std::to_string(cols) + "]";
}

std::string describe(const MatrixView& view) {
  std::string s = describe(view.type, view.rows, view.cols);
  if (view.interleave != 0) {
    s += std::string(" (repacked by ") + std::to_string(view.interleave) + " rows" +
         (view.vnni ? ", VNNI order)" : ")");
  }
  return s;
}

void check_shape(Type type, std::size_t rows, std::size_t cols) {
  const TypeTraits& t = traits(type);
  if (cols % t.row_multiple != 0) {
    const char* why = t.row_multiple == 256 ? " (K-quant super-block)" : " (block size)";
    throw InputError("quant: " + describe(type, rows, cols) + ": row length " +
                     std::to_string(cols) + " is not a multiple of " +
                     std::to_string(t.row_multiple) + why);
  }
  if (type == Type::kModelSlimInt4 && rows % 2 != 0) {
    throw InputError("quant: " + describe(type, rows, cols) + ": " + std::to_string(rows) +
                     " output rows is odd, but ModelSlim int4 packs two output rows per byte");
  }
}

std::size_t row_bytes(Type type, std::size_t cols) {
  const TypeTraits& t = traits(type);
  check_shape(type, type == Type::kModelSlimInt4 ? 2 : 1, cols);
  if (type == Type::kModelSlimInt4) return cols;  // one packed row = two output rows
  return checked_mul(cols / t.block_elems, t.block_bytes, type, 1, cols);
}

std::size_t data_bytes(Type type, std::size_t rows, std::size_t cols) {
  check_shape(type, rows, cols);
  if (type == Type::kModelSlimInt4) return checked_mul(rows / 2, cols, type, rows, cols);
  const TypeTraits& t = traits(type);
  return checked_mul(rows, checked_mul(cols / t.block_elems, t.block_bytes, type, rows, cols), type,
                     rows, cols);
}

void validate(const MatrixView& v) {
  const std::size_t expected = data_bytes(v.type, v.rows, v.cols);
  if (v.data.size() != expected) {
    throw InputError("quant: " + describe(v) + ": data has " + std::to_string(v.data.size()) +
                     " bytes, expected " + std::to_string(expected));
  }
  if (v.vnni && (!can_repack_vnni(v.type) || v.interleave != kVnniRows)) {
    throw InputError("quant: " + describe(v) +
                     ": the VNNI order needs Q8_0, Q4_0, Q2_K or Q3_K rows interleaved by " +
                     std::to_string(kVnniRows));
  }
  if (!v.vnni && v.interleave != 0 &&
      (!can_repack(v.type) || v.interleave < 2 || v.interleave > 16)) {
    throw InputError("quant: " + describe(v) + ": rows interleaved by " +
                     std::to_string(v.interleave) +
                     " (only Q8_0, Q4_0 and MXFP4 can be repacked, by 2 to 16 rows)");
  }
  const bool ct = v.type == Type::kMXFP4Packed;
  const bool ms = v.type == Type::kModelSlimInt8 || v.type == Type::kModelSlimInt4;
  if (ct) {
    check_span(v, "E8M0 scale array", checked_mul(v.rows, v.cols / 32, v.type, v.rows, v.cols),
               v.e8m0.size());
  } else {
    check_empty(v, "E8M0 scale array", v.e8m0.size());
  }
  if (!ms) {
    check_empty(v, "weight_scale", v.scale.size());
    check_empty(v, "weight_offset", v.offset.size());
    check_empty(v, "weight_scale_second", v.group_scale.size());
    check_empty(v, "weight_offset_second", v.group_offset.size());
    if (v.group_size != 0) {
      throw InputError("quant: " + describe(v) + ": group_size " + std::to_string(v.group_size) +
                       " is only meaningful for MS_INT4");
    }
    return;
  }
  check_span(v, "weight_scale", v.rows, v.scale.size());
  if (v.type == Type::kModelSlimInt8 && v.group_size != 0) {
    throw InputError("quant: " + describe(v) + ": MS_INT8 is per-channel, got group_size " +
                     std::to_string(v.group_size));
  }
  if (v.group_size == 0) {
    if (!v.offset.empty()) check_span(v, "weight_offset", v.rows, v.offset.size());
    check_empty(v, "weight_scale_second", v.group_scale.size());
    check_empty(v, "weight_offset_second", v.group_offset.size());
    return;
  }
  if (v.group_size % 32 != 0 || v.cols % v.group_size != 0) {
    throw InputError("quant: " + describe(v) + ": group_size " + std::to_string(v.group_size) +
                     " must be a multiple of 32 that divides the row length " +
                     std::to_string(v.cols));
  }
  if (!v.offset.empty()) {
    throw InputError("quant: " + describe(v) + ": a per-channel weight_offset with group scales " +
                     "is not supported; pass group offsets (weight_offset_second) instead");
  }
  const std::size_t groups = checked_mul(v.rows, v.cols / v.group_size, v.type, v.rows, v.cols);
  check_span(v, "weight_scale_second", groups, v.group_scale.size());
  if (!v.group_offset.empty()) check_span(v, "weight_offset_second", groups, v.group_offset.size());
}

MatrixView row_slice(const MatrixView& v, std::size_t first, std::size_t count) {
  validate(v);
  if (first > v.rows || count > v.rows - first ||
      (v.type == Type::kModelSlimInt4 && (first % 2 != 0 || count % 2 != 0))) {
    throw InputError("quant: " + describe(v) + ": cannot take rows [" + std::to_string(first) +
                     ", " + std::to_string(first + count) + ")");
  }
  MatrixView s = v;
  if (v.interleave != 0) {
    // Whole groups (possibly followed by the plain tail rows), or rows of the plain tail only.
    const std::size_t full = v.rows / v.interleave * v.interleave;
    if (first >= full) {
      s.interleave = 0;
      s.vnni = false;
    } else if (first % v.interleave != 0 || (count % v.interleave != 0 && first + count < full)) {
      throw InputError("quant: " + describe(v) + ": rows [" + std::to_string(first) + ", " +
                       std::to_string(first + count) + ") split a group of " +
                       std::to_string(v.interleave) + " interleaved rows");
    }
  }
  s.rows = count;
  const std::size_t per_row = v.rows == 0 ? 0 : v.data.size() / v.rows;  // exact: validated shape
  s.data = v.data.subspan(first * per_row, count * per_row);
  auto cut = [&](auto span) {
    if (span.empty()) return span;
    const std::size_t n = span.size() / v.rows;
    return span.subspan(first * n, count * n);
  };
  s.e8m0 = cut(v.e8m0);
  s.scale = cut(v.scale);
  s.offset = cut(v.offset);
  s.group_scale = cut(v.group_scale);
  s.group_offset = cut(v.group_offset);
  return s;
}

}  // namespace k3::quant
