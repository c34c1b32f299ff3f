// Activations prepared once for the kernels: fp32, or int8 per block with float scales.
// Prepare once, multiply by every weight matrix of the same activation format and width
// (for example q/k/v projections of one hidden state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "quant/types.h"

namespace k3::quant {

// What a kernel reads. Row i of the int8 formats: qs[i*cols ...], d/isum/xsum[i*blocks ...].
struct ActView {
  ActFormat format = ActFormat::kF32;
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::size_t blocks = 0;               // per row: cols/32 (Q8 32) or cols/256 (Q8_K)
  const float* f32 = nullptr;           // kF32: [rows, cols]
  const std::int8_t* qs = nullptr;      // int8 codes [rows, cols]
  const float* d = nullptr;             // block scale: x ~ d * q      [rows, blocks]
  const std::int32_t* isum = nullptr;   // Q8 32: sum of the 32 codes  [rows, blocks]
  const std::int32_t* nisum = nullptr;  // Q8 32: -isum (seeds exact integer offset corrections)
  const float* xsum = nullptr;          // Q8 32 sums: exact sum of the 32 inputs (offsets)
  const float* row_xsum = nullptr;      // Q8 32 sums: per row, exact sum of x        [rows]
  const std::int16_t* bsums = nullptr;  // Q8_K: sums of 16 codes      [rows, blocks*16]

  // Rows >= kInterleaveMinRows: the same codes for GEMM kernels, grouped by 16 activation
  // rows (padded with zeros): for group g and 32-code block b, 8 chunks of 64 bytes, chunk j
  // holding bytes 4j..4j+3 of the block for each of the 16 rows (row = int32 lane). For Q8_K
  // the 32-code blocks are the 8 consecutive eighths of each 256-block.
  std::size_t groups16 = 0;
  const std::int8_t* qs16 = nullptr;      // [groups16, cols / 32, 8, 16, 4]
  const float* d16 = nullptr;             // [groups16, blocks, 16]
  const std::int32_t* nisum16 = nullptr;  // Q8 32: [groups16, blocks, 16]
  // Q8_K: the 16 sums of 16 codes of each 256-block, two sums (2p, 2p + 1) per int32 lane.
  const std::int16_t* bsums16 = nullptr;  // [groups16, blocks, 8, 16, 2]
};

// Activation row counts from which the 16-row interleaved copy is built.
inline constexpr std::size_t kInterleaveMinRows = 12;

class Activations {
 public:
  Activations() = default;
  // The view points into the owned buffers (fp32: into x): moving keeps it valid, copying would
  // not.
  Activations(Activations&&) = default;
  Activations& operator=(Activations&&) = default;
  Activations(const Activations&) = delete;
  Activations& operator=(const Activations&) = delete;

  // x is row-major [rows, cols]. Fp32 activations are read where they are (x must outlive the
  // result: a copy was a large allocation and a pass over x on every product). Int8 formats:
  // d = amax/127 per block of 32 and codes rounded to nearest even (Q8 32), or ggml's
  // quantize_row_q8_K_ref rule (Q8_K). Throws InputError if cols is not a multiple of the
  // format's block.
  static Activations prepare(ActFormat format, std::span<const float> x, std::size_t rows,
                             std::size_t cols);

  ActFormat format() const { return view_.format; }
  std::size_t rows() const { return view_.rows; }
  std::size_t cols() const { return view_.cols; }
  const ActView& view() const { return view_; }

 private:
  ActView view_;
  std::vector<std::int8_t> qs_;
  std::vector<float> d_;
  std::vector<std::int32_t> isum_;
  std::vector<std::int32_t> nisum_;
  std::vector<float> xsum_;
  std::vector<float> row_xsum_;
  std::vector<std::int16_t> bsums_;
  std::vector<std::int8_t> qs16_;
  std::vector<float> d16_;
  std::vector<std::int32_t> nisum16_;
  std::vector<std::int16_t> bsums16_;
};

}  // namespace k3::quant
