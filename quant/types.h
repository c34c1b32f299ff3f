// Weight formats as plain data: the type enum, its traits, and a non-owning view of one
// row-major weight matrix W [rows (outputs), cols (inputs)] in any supported encoding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace k3::quant {

// Every encoding a Kimi-K3 checkpoint can hand us. The GGUF ones are bit-exact with ggml.
enum class Type : std::uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,   // ggml block_q8_0: f16 d | int8 qs[32]                          (34 B / 32)
  kQ4_0,   // ggml block_q4_0: f16 d | nibbles qs[16]                       (18 B / 32)
  kQ2_K,   // ggml block_q2_K: scales[16] | qs[64] | f16 d | f16 dmin        (84 B / 256)
  kQ3_K,   // ggml block_q3_K: hmask[32] | qs[64] | scales[12] | f16 d      (110 B / 256)
  kMXFP4,  // ggml block_mxfp4: u8 E8M0 e | nibbles qs[16]                  (17 B / 32)
  // compressed-tensors "mxfp4-pack-quantized" (official Kimi-K3 routed experts): data is
  // [rows, cols/2] u8 (low nibble = even element), plus a separate [rows, cols/32] E8M0 array.
  kMXFP4Packed,
  // ModelSlim W8A8 / W8A8_DYNAMIC: int8 [rows, cols], per-row scale (and optional offset).
  kModelSlimInt8,
  // ModelSlim W4A8_DYNAMIC, version "1.0.0": int8 [rows/2, cols], two signed int4 per byte along
  // the OUTPUT dimension (low nibble = row 2j, high nibble = row 2j+1), per-row scale and
  // optionally per-group second-level scales [rows, cols/group_size].
  kModelSlimInt4,
};

inline constexpr std::size_t kTypeCount = 11;

// How the kernels want the activations for a weight type.
enum class ActFormat : std::uint8_t {
  kF32,               // plain floats (F32, F16, BF16 weights)
  kQ8Block32,         // int8 per block of 32, float scale per block (Q8_0, Q4_0, MXFP4)
  kQ8Block32EvenOdd,  // as kQ8Block32, each block stored as [even elements, odd elements]
  kQ8K,               // ggml-style Q8_K: int8 per block of 256, float scale, int16 sums of 16
  kQ8Block32Sums,     // as kQ8Block32, plus each block's and row's exact input sum (ModelSlim's
                      // offsets subtract offset * sum(x))
};

// One row of a self-contained type to and from floats (n a multiple of block_elems): the scalar
// reference (quant/reference.h), as ggml's type_traits to_float / from_float_ref.
using ToFloatRow = void (*)(const std::uint8_t* src, float* dst, std::size_t n);
using FromFloatRow = void (*)(const float* src, std::uint8_t* dst, std::size_t n);

struct TypeTraits {
  Type type;
  std::string_view name;     // "Q4_0", "MS_INT4", ...
  std::size_t block_elems;   // elements per block along a row (MS_INT4: 2 rows per byte)
  std::size_t block_bytes;   // bytes of one block in `data` (side arrays not counted)
  std::size_t row_multiple;  // cols must be a multiple of this
  bool integer_kernel;       // kernels quantize activations to int8 (false: fp32 activations)
  ActFormat act;
  int ggml_type;  // ggml_type id in GGUF, or -1 if not a GGUF type
  // Null for the types whose rows need side arrays (CT_MXFP4, ModelSlim): use the MatrixView.
  ToFloatRow to_float;
  FromFloatRow from_float;
};

const TypeTraits& traits(Type type);
std::string_view name(Type type);
std::optional<Type> type_from_name(std::string_view name);
std::optional<Type> type_from_ggml(int ggml_type);
std::string_view name(ActFormat format);

// A non-owning description of one weight matrix W [rows, cols], row-major: y = W x.
// Side arrays are empty unless the type uses them. Scales and offsets are fp32 here; a loader
// converts checkpoint bf16/fp16 side tensors once at load time (they are tiny).
struct MatrixView {
  Type type = Type::kF32;
  std::size_t rows = 0;  // output features
  std::size_t cols = 0;  // input features
  std::span<const std::uint8_t> data;

  // kMXFP4Packed: one E8M0 byte per 32 columns, [rows, cols/32].
  std::span<const std::uint8_t> e8m0;

  // ModelSlim: dequantized w = (q - offset[r]) * scale[r]  (per-channel mode), or
  //            w = (q - group_offset[r,g]) * group_scale[r,g] * scale[r]  (group mode).
  std::span<const float> scale;         // [rows]                      (required)
  std::span<const float> offset;        // [rows]            (optional, per-channel mode only)
  std::span<const float> group_scale;   // [rows, cols/group_size]     (group mode)
  std::span<const float> group_offset;  // [rows, cols/group_size]     (optional, group mode)
  std::size_t group_size = 0;           // 0 = per-channel (MS_INT4 only)

  // 0: `data` is in the checkpoint layout above. R > 0 (see quant/repack.h, which produces
  // it): the rows are repacked in groups of R consecutive rows, block by block, so one
  // sequential pass feeds R dot products; the rows % R last rows stay in the plain layout.
  // `data` keeps its size, so row r still starts at byte r * row_bytes of its group.
  std::size_t interleave = 0;
  // Only with interleave == 16 (quant::repack_vnni): each super-block in the VNNI order of
  // quant/repack.h (4 consecutive codes of the 16 rows side by side, then the 16 scales)
  // instead of the checkpoint's fields.
  bool vnni = false;
};

// The view of a matrix an owner keeps (QuantizedMatrix, Repacked, the loader's weights): the
// owner's `data`, and whichever side arrays (e8m0, scale, offset, group_scale, group_offset,
// group_size) and layout fields (interleave, vnni) it has, by MatrixView's names.
template <class Owner>
MatrixView view_of(const Owner& owner, Type type, std::size_t rows, std::size_t cols) {
  MatrixView v;
  v.type = type;
  v.rows = rows;
  v.cols = cols;
  v.data = owner.data;
  if constexpr (requires { owner.scale; }) {
    v.e8m0 = owner.e8m0;
    v.scale = owner.scale;
    v.offset = owner.offset;
    v.group_scale = owner.group_scale;
    v.group_offset = owner.group_offset;
    v.group_size = owner.group_size;
  }
  if constexpr (requires { owner.interleave; }) {
    v.interleave = owner.interleave;
    v.vnni = owner.vnni;
  }
  return v;
}

// Bytes of `data` for a matrix of this type and shape (checks the shape rules first).
std::size_t data_bytes(Type type, std::size_t rows, std::size_t cols);
// Bytes of one row of `data` (block formats; MS_INT4 returns the bytes of one packed row pair).
std::size_t row_bytes(Type type, std::size_t cols);

// Throws k3::InputError naming type and shape when the shape breaks the type's rules
// (K-quants: cols % 256; Q4_0/Q8_0/MXFP4/ModelSlim: cols % 32; MS_INT4: even rows).
void check_shape(Type type, std::size_t rows, std::size_t cols);
// Shape rules plus every span size and the group configuration.
void validate(const MatrixView& view);

// Rows [first, first + count) of a view, side arrays included (a tensor-parallel row split).
// MS_INT4 needs an even `first` and `count`. Throws InputError when out of range.
MatrixView row_slice(const MatrixView& view, std::size_t first, std::size_t count);

// "Q4_0 [4096 x 7168]"
std::string describe(const MatrixView& view);
std::string describe(Type type, std::size_t rows, std::size_t cols);

}  // namespace k3::quant
