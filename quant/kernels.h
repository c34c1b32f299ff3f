// y = W x on the quantized weights, without expanding them to floats. W is row-major
// [rows (outputs), cols (inputs)]; GEMM computes Y [n, rows] = X [n, cols] * W^T.
//
// Integer-based formats quantize the activations to int8 per block (Q8 32 for Q8_0, Q4_0,
// MXFP4 and ModelSlim, ggml's Q8_K for Q2_K/Q3_K); F32/F16/BF16 use fp32 activations. Work is
// split over output rows with oneTBB, so the thread count is whatever tbb::global_control the
// caller installed; no threads are created here.
#pragma once

#include <cstddef>
#include <span>

#include "quant/activations.h"
#include "quant/isa.h"
#include "quant/types.h"

namespace k3::quant {

// Y [x.rows(), w.rows] = X W^T with prepared activations (format must be traits(w.type).act).
void gemm(const MatrixView& w, const Activations& x, std::span<float> y);
void gemm(const MatrixView& w, const Activations& x, std::span<float> y, Isa isa);

// Convenience: prepares X [n, w.cols] itself.
void gemm(const MatrixView& w, std::span<const float> x, std::size_t n, std::span<float> y);

// y [w.rows] = W x for one activation row x [w.cols].
void gemv(const MatrixView& w, std::span<const float> x, std::span<float> y);
void gemv(const MatrixView& w, std::span<const float> x, std::span<float> y, Isa isa);

// Whether `isa` has a kernel for `type` in the 16-row VNNI order (quant/repack.h), so that a
// repack_vnni() copy runs faster than the plain matrix instead of being unpacked tile by tile.
bool has_vnni_kernel(Type type, Isa isa);

// The dot product of row `row` of W with x [w.cols], through the same kernels.
float dot(const MatrixView& w, std::size_t row, std::span<const float> x);
float dot(const MatrixView& w, std::size_t row, std::span<const float> x, Isa isa);

}  // namespace k3::quant
