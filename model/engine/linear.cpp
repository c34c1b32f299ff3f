#include "model/engine/linear.h"

#include "common/error.h"
#include "quant/kernels.h"
#include "quant/quantize.h"
#include "quant/reference.h"
#include "quant/repack.h"

namespace k3::model::engine {

namespace {

quant::MatrixView f32_view(const std::vector<float>& values, std::size_t rows, std::size_t cols) {
  quant::MatrixView v;
  v.type = quant::Type::kF32;
  v.rows = rows;
  v.cols = cols;
  v.data = std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(values.data()),
                                         values.size() * sizeof(float));
  return v;
}

}  // namespace

Linear::Linear(const quant::MatrixView& view, bool exact) : view_(view) {
  if (!exact || view.type == quant::Type::kF32) return;
  auto values = std::make_shared<std::vector<float>>(view.rows * view.cols);
  quant::dequantize(view, *values);
  view_ = f32_view(*values, view.rows, view.cols);
  owned_ = std::move(values);
}

Linear Linear::requantized(const quant::MatrixView& view, quant::Type type) {
  std::vector<float> values(view.rows * view.cols);
  quant::dequantize(view, values);
  auto encoded = std::make_shared<quant::QuantizedMatrix>(
      quant::quantize(type, values, view.rows, view.cols));
  Linear out;
  out.view_ = encoded->view();
  out.owned_ = std::move(encoded);
  return out;
}

Linear Linear::repacked(const quant::MatrixView& view) {
  if (view.interleave != 0 || view.rows < quant::kVnniRows ||
      !quant::has_vnni_kernel(view.type, quant::active_isa())) {
    return Linear(view, false);
  }
  auto packed = std::make_shared<quant::Repacked>(quant::repack_vnni(view));
  Linear out;
  out.view_ = packed->view();
  out.owned_ = std::move(packed);
  return out;
}

Linear Linear::stacked(const quant::MatrixView& top, const quant::MatrixView& bottom, bool exact,
                       bool repack) {
  auto both = std::make_shared<quant::QuantizedMatrix>(quant::stack_rows(top, bottom));
  Linear out = exact    ? Linear(both->view(), true)
               : repack ? repacked(both->view())
                        : Linear(both->view(), false);
  if (!out.owned_) out.owned_ = std::move(both);  // still a view of the stacked bytes
  return out;
}

Linear::Linear(std::vector<float> values, std::size_t rows, std::size_t cols) {
  if (values.size() != rows * cols) {
    throw InternalError("Linear: " + std::to_string(values.size()) + " values for [" +
                        std::to_string(rows) + " x " + std::to_string(cols) + "]");
  }
  auto owned = std::make_shared<std::vector<float>>(std::move(values));
  view_ = f32_view(*owned, rows, cols);
  owned_ = std::move(owned);
}

void Linear::apply(std::span<const float> x, std::size_t n, std::span<float> y) const {
  if (n == 0) return;
  if (n == 1) {
    quant::gemv(view_, x.first(view_.cols), y.first(view_.rows));
  } else {
    quant::gemm(view_, x.first(n * view_.cols), n, y.first(n * view_.rows));
  }
}

void Linear::apply(const quant::Activations& x, std::span<float> y) const {
  if (x.rows() == 0) return;
  quant::gemm(view_, x, y.first(x.rows() * view_.rows));
}

void SharedInput::apply(const Linear& w, std::span<float> y) {
  if (n_ == 0) return;
  const quant::ActFormat format = w.act_format();
  for (const quant::Activations& a : prepared_) {
    if (a.format() == format && a.cols() == w.cols()) {
      w.apply(a, y);
      return;
    }
  }
  prepared_.push_back(quant::Activations::prepare(format, x_.first(n_ * w.cols()), n_, w.cols()));
  w.apply(prepared_.back(), y);
}

Linear Linear::rows_slice(std::size_t first, std::size_t count) const {
  Linear out;
  out.view_ = quant::row_slice(view_, first, count);
  out.owned_ = owned_;
  return out;
}

}  // namespace k3::model::engine
