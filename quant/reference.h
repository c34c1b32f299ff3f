// The scalar reference for every format: block layouts, row dequantizers and the reference
// quantizers. Everything here is plain C++ with no SIMD; the kernels are tested against it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "quant/blocks.h"
#include "quant/types.h"

namespace k3::quant {

// The 16 signed 6-bit sub-block scales of a Q3_K block (already minus 32).
void unpack_q3_k_scales(const std::uint8_t* packed12, std::int8_t out[16]);

// Dequantizes n elements (n a multiple of the block size) of one row of a self-contained
// block type (TypeTraits::to_float: F32, F16, BF16, Q8_0, Q4_0, Q2_K, Q3_K, MXFP4). Throws
// InternalError for a type that needs side arrays.
void dequantize_row(Type type, const std::uint8_t* src, float* dst, std::size_t n);

// compressed-tensors MXFP4: `packed` holds n/2 bytes, `e8m0` n/32 scale bytes.
void dequantize_row_mxfp4_packed(const std::uint8_t* packed, const std::uint8_t* e8m0, float* dst,
                                 std::size_t n);

// Row `row` of any matrix, ModelSlim included; dst.size() == view.cols.
void dequantize_row(const MatrixView& view, std::size_t row, std::span<float> dst);
// The whole matrix, row-major; dst.size() == rows * cols. Validates the view first.
void dequantize(const MatrixView& view, std::span<float> dst);

// Reference quantizers for the self-contained block types (TypeTraits::from_float; n a multiple
// of the block size):
// Q8_0, Q4_0 and MXFP4 reproduce ggml's quantize_row_*_ref byte for byte; Q2_K and Q3_K
// follow quantize_row_q2_K_ref / quantize_row_q3_K_ref operation by operation (see README).
// F16/BF16 round to nearest even. Inputs may hold NaN/Inf: the output is then unspecified
// but the call is well defined.
void quantize_row(Type type, const float* src, std::uint8_t* dst, std::size_t n);

// compressed-tensors MXFP4 with the same scale rule and rounding as ggml's MXFP4.
void quantize_row_mxfp4_packed(const float* src, std::uint8_t* packed, std::uint8_t* e8m0,
                               std::size_t n);

namespace detail {
// The rows behind TypeTraits::to_float / from_float, one instantiation per self-contained type
// (n already checked to be a multiple of the block size).
template <Type T>
void to_float_row(const std::uint8_t* src, float* dst, std::size_t n);
template <Type T>
void from_float_row(const float* src, std::uint8_t* dst, std::size_t n);
// The scalar Q2KFit (kernel_table.h): one 256-element block's 16 sub-block fits.
void q2_k_fit(const float* x, std::uint8_t* L, float* scales, float* neg_mins);
}  // namespace detail

}  // namespace k3::quant
