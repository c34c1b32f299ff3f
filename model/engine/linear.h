// engine::Linear: one weight matrix W [rows (outputs), cols (inputs)] of this rank, in whatever
// representation the load plan chose, applied to a batch of activation rows through the quant/
// kernels. The layer code never asks which format the checkpoint was.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "quant/activations.h"
#include "quant/types.h"

namespace k3::model::engine {

class Linear {
 public:
  Linear() = default;
  // `exact`: dequantize once to F32 so products use fp32 activations instead of int8 blocks (the
  // reference comparison); otherwise the view is used in place (mapped or owned bytes).
  Linear(const quant::MatrixView& view, bool exact);
  // A matrix the engine built itself (e.g. the absorbed MLA K), row-major F32 [rows, cols].
  Linear(std::vector<float> values, std::size_t rows, std::size_t cols);
  // `view` re-encoded once as `type` (e.g. a BF16 drafter's matrices as Q8_0, for the integer
  // kernels), held by the Linear.
  static Linear requantized(const quant::MatrixView& view, quant::Type type);
  // `view` copied once into the 16-row VNNI order (quant/repack.h) when the active ISA has a
  // kernel for its type and it has a whole group of rows; otherwise in place, as Linear(view,
  // false). Products give the same bits either way; the repacked batch-1 GEMV reads its weights
  // as a few sequential streams (docs/PERFORMANCE.md, "Closing the gap").
  static Linear repacked(const quant::MatrixView& view);
  // The rows of `top` then those of `bottom` (quant::stack_rows) as one matrix, dequantized to
  // F32 when `exact`, else repacked when `repack` (and the ISA has a kernel), else held as
  // stacked: an expert's gate and up in one product.
  static Linear stacked(const quant::MatrixView& top, const quant::MatrixView& bottom, bool exact,
                        bool repack);
  bool is_repacked() const { return view_.interleave != 0; }

  std::size_t rows() const { return view_.rows; }
  std::size_t cols() const { return view_.cols; }
  bool empty() const { return view_.rows == 0; }
  const quant::MatrixView& view() const { return view_; }
  quant::ActFormat act_format() const { return quant::traits(view_.type).act; }

  // y [n, rows] = x [n, cols] W^T. n == 0 is a no-op (a DP group with nothing to do).
  void apply(std::span<const float> x, std::size_t n, std::span<float> y) const;
  // With activations already prepared for act_format() (shared by several projections).
  void apply(const quant::Activations& x, std::span<float> y) const;

  // Rows [first, first + count) as their own Linear (a head's slice); shares the bytes. On a
  // repacked Linear only whole 16-row groups can be sliced (InternalError otherwise).
  Linear rows_slice(std::size_t first, std::size_t count) const;

 private:
  quant::MatrixView view_;
  std::shared_ptr<const void> owned_;  // the bytes of view_ when the Linear made them
};

// One batch of input rows [n, cols] that several projections read (q/k/v of one hidden state,
// gate and up of an MLP): its activations are prepared (quantized) once per activation format,
// on first use, instead of once per projection. Holds a view of `x`: keep it alive.
class SharedInput {
 public:
  SharedInput(std::span<const float> x, std::size_t n) : x_(x), n_(n) {}
  // y [n, w.rows()] = x W^T, as w.apply(x, n, y) would compute it, bit for bit.
  void apply(const Linear& w, std::span<float> y);

 private:
  std::span<const float> x_;
  std::size_t n_;
  std::vector<quant::Activations> prepared_;  // at most one per (format, width)
};

}  // namespace k3::model::engine
