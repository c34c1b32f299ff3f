#include "quant/kernels.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <string>
#include <vector>

#include "quant/error.h"
#include "quant/kernel_table.h"

namespace k3::quant {
namespace {

using detail::RowKernel;
using detail::TileKernel;
using std::size_t;

// The best kernel of each kind available at `isa` (a null tile kernel means: use rows).
struct Selected {
  RowKernel row;
  TileKernel tile;
};

Selected select(Type type, Isa isa) {
  const auto i = static_cast<size_t>(type);
  Selected s{detail::scalar_kernels().row[i], nullptr};
  auto take = [&](const detail::KernelTable& t) {
    if (t.row[i] != nullptr) s.row = t.row[i];
    if (t.tile[i] != nullptr) s.tile = t.tile[i];
  };
  if (isa >= Isa::kAvx2) take(detail::avx2_kernels());
  if (isa >= Isa::kAvx512) take(detail::avx512_kernels());
  return s;
}

void check_isa(Isa isa) {
  if (static_cast<int>(isa) > static_cast<int>(detected_isa())) {
    throw UsageError("quant: kernels for " + std::string(name(isa)) +
                     " requested, but this CPU supports at most " +
                     std::string(name(detected_isa())));
  }
}

}  // namespace

void gemm(const MatrixView& w, const Activations& x, std::span<float> y, Isa isa) {
  validate(w);
  check_isa(isa);
  const TypeTraits& t = traits(w.type);
  const ActView& a = x.view();
  if (a.format != t.act || a.cols != w.cols) {
    throw InputError("quant: " + describe(w) + " needs " + std::string(name(t.act)) +
                     " activations of width " + std::to_string(w.cols) + ", got " +
                     std::string(name(a.format)) + " of width " + std::to_string(a.cols));
  }
  if (y.size() != a.rows * w.rows) {
    throw InputError("quant: " + describe(w) + " times " + std::to_string(a.rows) +
                     " activation rows needs an output of " + std::to_string(a.rows * w.rows) +
                     " floats, got " + std::to_string(y.size()));
  }
  if (w.rows == 0 || a.rows == 0) return;
  if (w.cols == 0) {
    std::fill(y.begin(), y.end(), 0.0f);
    return;
  }
  const Selected k = select(w.type, isa);
  const size_t rpu = detail::rows_per_unit(w.type);
  const size_t units = w.rows / rpu;
  const size_t unit_bytes = std::max<size_t>(1, w.data.size() / units);
  // Chunks of at least ~32 KiB of weights keep the scheduling overhead negligible; tiles of 8
  // units are swept once per group of kMaxActs activation rows, so the tile stays in L1/L2
  // while the activations stream.
  const size_t grain = std::max<size_t>(1, (32u << 10) / unit_bytes);
  constexpr size_t kTile = detail::kTileUnits;
  const size_t n = a.rows;
  float* out = y.data();
  tbb::parallel_for(tbb::blocked_range<size_t>(0, units, grain),
                    [&](const tbb::blocked_range<size_t>& r) {
                      for (size_t u0 = r.begin(); u0 < r.end(); u0 += kTile) {
                        const size_t u1 = std::min(r.end(), u0 + kTile);
                        if (k.tile != nullptr) {
                          k.tile(w, u0, u1 - u0, a, out, w.rows);
                          continue;
                        }
                        for (size_t a0 = 0; a0 < n; a0 += detail::kMaxActs) {
                          const size_t na = std::min(detail::kMaxActs, n - a0);
                          for (size_t u = u0; u < u1; ++u) k.row(w, u, a, a0, na, out, w.rows);
                        }
                      }
                    });
}

void gemm(const MatrixView& w, const Activations& x, std::span<float> y) {
  gemm(w, x, y, active_isa());
}

void gemm(const MatrixView& w, std::span<const float> x, std::size_t n, std::span<float> y) {
  validate(w);
  const Activations a = Activations::prepare(traits(w.type).act, x, n, w.cols);
  gemm(w, a, y, active_isa());
}

void gemv(const MatrixView& w, std::span<const float> x, std::span<float> y, Isa isa) {
  validate(w);
  const Activations a = Activations::prepare(traits(w.type).act, x, 1, w.cols);
  gemm(w, a, y, isa);
}

void gemv(const MatrixView& w, std::span<const float> x, std::span<float> y) {
  gemv(w, x, y, active_isa());
}

float dot(const MatrixView& w, std::size_t row, std::span<const float> x, Isa isa) {
  validate(w);
  if (row >= w.rows) {
    throw InputError("quant: " + describe(w) + ": row " + std::to_string(row) + " out of range");
  }
  const size_t rpu = detail::rows_per_unit(w.type);
  const MatrixView unit = row_slice(w, row - row % rpu, rpu);
  float y[2] = {};
  gemv(unit, x, std::span<float>(y, rpu), isa);
  return y[row % rpu];
}

float dot(const MatrixView& w, std::size_t row, std::span<const float> x) {
  return dot(w, row, x, active_isa());
}

}  // namespace k3::quant
