// Whole-matrix quantization into any format: what the synthetic checkpoint writer uses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "quant/types.h"

namespace k3::quant {

struct QuantizeOptions {
  // MS_INT4 only: 0 = per-channel scales; otherwise the group size along a row (a multiple of
  // 32 dividing cols) for the second-level scales (ModelSlim's weight_scale_second).
  std::size_t group_size = 0;
  // ModelSlim only: write non-zero offsets (min/max range) instead of the symmetric zeros that
  // ModelSlim emits. Exists to exercise the offset path.
  bool asymmetric = false;
};

// Owns the bytes of one quantized matrix in the exact layout of its checkpoint tensors.
struct QuantizedMatrix {
  Type type = Type::kF32;
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::size_t group_size = 0;
  std::vector<std::uint8_t> data;   // the weight tensor (GGUF blob, packed nibbles, int8...)
  std::vector<std::uint8_t> e8m0;   // kMXFP4Packed: weight_scale
  std::vector<float> scale;         // ModelSlim weight_scale
  std::vector<float> offset;        // ModelSlim weight_offset (per-channel)
  std::vector<float> group_scale;   // ModelSlim weight_scale_second
  std::vector<float> group_offset;  // ModelSlim weight_offset_second

  MatrixView view() const;
};

// The rows of `top` then those of `bottom` as one owned matrix (both in the checkpoint layout,
// of one type, width and ModelSlim mode; InputError otherwise): two projections of one input,
// such as an expert's gate and up, multiplied in one pass. Each row keeps its bytes, so every
// product row has the bits it had in its own matrix.
QuantizedMatrix stack_rows(const MatrixView& top, const MatrixView& bottom);

// Quantizes a row-major fp32 matrix w [rows, cols]. GGUF block types use the reference rule of
// reference.h (rows are independent, so this runs in parallel with oneTBB); ModelSlim:
//   MS_INT8: scale = amax/127 per row, q = round(w/scale) in [-127, 127], offset 0
//            (asymmetric: scale = (max-min)/255, q in [-128, 127], w = (q - offset) * scale);
//   MS_INT4 per-channel: scale = amax/7 per row, q in [-8, 7];
//   MS_INT4 per-group: group scale s_g = amax_g/7, scale[r] = max_g s_g,
//            weight_scale_second = s_g / scale[r] (so the product is s_g).
// Throws InputError for a shape the type cannot hold.
QuantizedMatrix quantize(Type type, std::span<const float> w, std::size_t rows, std::size_t cols,
                         const QuantizeOptions& options = {});

}  // namespace k3::quant
