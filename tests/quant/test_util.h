// Helpers shared by the quant tests: seeded random data and an fp64 reference product.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "quant/activations.h"
#include "common/error.h"
#include "quant/quantize.h"
#include "quant/reference.h"
#include "quant/types.h"

namespace k3::quant::testing {

// The message of the InputError that f() throws (checking its input exit code), or a test
// failure when it throws none.
template <class F>
std::string input_error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    EXPECT_EQ(e.exit_code(), ExitCode::kInput);
    return e.what();
  }
  ADD_FAILURE() << "no InputError thrown";
  return {};
}

inline std::vector<float> gaussian(std::mt19937_64& rng, std::size_t n, float sigma = 1.0f) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Gaussian with a few large outliers, like real activations and weights.
inline std::vector<float> heavy_tailed(std::mt19937_64& rng, std::size_t n) {
  std::vector<float> v = gaussian(rng, n);
  std::uniform_int_distribution<std::size_t> pick(0, n - 1);
  for (std::size_t i = 0; i < n / 50 + 1; ++i) v[pick(rng)] *= 12.0f;
  return v;
}

inline std::vector<std::uint8_t> random_bytes(std::mt19937_64& rng, std::size_t n) {
  std::vector<std::uint8_t> v(n);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : v) b = static_cast<std::uint8_t>(byte(rng));
  return v;
}

// A view of `type` [rows, cols] over `data`, with ModelSlim's per-row scale and offset if given.
inline MatrixView view_over(Type type, std::size_t rows, std::size_t cols,
                            std::span<const std::uint8_t> data, std::span<const float> scale = {},
                            std::span<const float> offset = {}) {
  const struct {
    std::span<const std::uint8_t> data, e8m0;
    std::span<const float> scale, offset, group_scale, group_offset;
    std::size_t group_size;
  } arrays{data, {}, scale, offset, {}, {}, 0};
  return view_of(arrays, type, rows, cols);
}

inline std::vector<float> dequantized(const MatrixView& w) {
  std::vector<float> out(w.rows * w.cols);
  dequantize(w, out);
  return out;
}

// The weights with ModelSlim offsets dropped (integer weight * scales); equal to the
// dequantized weights for every other type. The kernels multiply these by the int8
// activations and apply the offset term with exact sums of x, so the activation rounding
// error is bounded by sum |no_offset_k| * |x_k - xq_k|.
inline std::vector<float> no_offset_dequantized(const MatrixView& w) {
  MatrixView v = w;
  std::vector<float> no_offset(w.offset.size(), 0.0f), no_goffset(w.group_offset.size(), 0.0f);
  v.offset = no_offset;
  v.group_offset = no_goffset;
  return dequantized(v);
}

// The activations as the kernels see them, dequantized, in natural element order.
inline std::vector<float> act_dequantized(const Activations& a) {
  const ActView& v = a.view();
  std::vector<float> out(v.rows * v.cols);
  if (v.format == ActFormat::kF32) {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = v.f32[i];
    return out;
  }
  const std::size_t block = v.format == ActFormat::kQ8K ? 256 : 32;
  for (std::size_t r = 0; r < v.rows; ++r) {
    for (std::size_t k = 0; k < v.cols; ++k) {
      std::size_t pos = k;
      if (v.format == ActFormat::kQ8Block32EvenOdd) {
        const std::size_t j = k % 32;
        pos = k - j + (j % 2) * 16 + j / 2;
      }
      out[r * v.cols + k] =
          v.d[r * v.blocks + k / block] * static_cast<float>(v.qs[r * v.cols + pos]);
    }
  }
  return out;
}

// Y [n, rows] in double from dequantized weights and the given activations.
inline std::vector<double> reference_gemm(const std::vector<float>& w, std::size_t rows,
                                          std::size_t cols, const std::vector<float>& x,
                                          std::size_t n) {
  std::vector<double> y(n * rows, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t r = 0; r < rows; ++r) {
      double s = 0.0;
      for (std::size_t k = 0; k < cols; ++k) {
        s += static_cast<double>(w[r * cols + k]) * static_cast<double>(x[i * cols + k]);
      }
      y[i * rows + r] = s;
    }
  }
  return y;
}

}  // namespace k3::quant::testing
