// Row-interleaved repacking (quant/repack.h): repack -> unpack gives the original bytes,
// dequantize on the repacked view gives the original values, and every kernel on the repacked
// view (each ISA here) matches the scalar kernel on the plain matrix, for row counts that are
// and are not multiples of the group size and batch sizes 1..33.
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quant/activations.h"
#include "quant/error.h"
#include "quant/kernels.h"
#include "quant/quantize.h"
#include "quant/reference.h"
#include "quant/repack.h"
#include "test_util.h"

namespace k3::quant {
namespace {

using testing::heavy_tailed;
using testing::random_bytes;

const Type kTypes[] = {Type::kQ8_0, Type::kQ4_0, Type::kMXFP4};

std::string where(Type t, std::size_t rows, std::size_t cols, std::size_t r) {
  return std::string(name(t)) + " [" + std::to_string(rows) + " x " + std::to_string(cols) +
         "] by " + std::to_string(r);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST(QuantRepack, RoundTripAnyBytes) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<std::size_t> rows_d(0, 21), nb_d(1, 9);
  for (Type t : kTypes) {
    ASSERT_TRUE(can_repack(t));
    for (std::size_t r : {2u, 4u, 8u, 16u}) {
      for (int trial = 0; trial < 4; ++trial) {
        const std::size_t rows = trial == 0 ? r : rows_d(rng), cols = 32 * nb_d(rng);
        MatrixView w;
        w.type = t;
        w.rows = rows;
        w.cols = cols;
        const std::vector<std::uint8_t> bytes = random_bytes(rng, data_bytes(t, rows, cols));
        w.data = bytes;
        const Repacked p = repack(w, r);
        const MatrixView v = p.view();
        EXPECT_EQ(v.interleave, r);
        EXPECT_EQ(p.data.size(), bytes.size());
        EXPECT_EQ(unpack(v), bytes) << where(t, rows, cols, r);
        if (rows >= r) {
          EXPECT_NE(p.data, bytes) << where(t, rows, cols, r);  // really moved
        }
        std::vector<float> d0(rows * cols), d1(rows * cols);
        dequantize(w, d0);
        dequantize(v, d1);
        EXPECT_TRUE(same_bits(d0, d1)) << where(t, rows, cols, r);
        // row slices on group boundaries and inside the plain tail
        const std::size_t full = rows / r * r;
        for (std::size_t first = 0; first < rows; ++first) {
          for (std::size_t count = 1; first + count <= rows; ++count) {
            const bool ok = first >= full ||
                            (first % r == 0 && (count % r == 0 || first + count >= full));
            if (!ok) {
              EXPECT_THROW(row_slice(v, first, count), InputError);
              continue;
            }
            const MatrixView s = row_slice(v, first, count);
            std::vector<float> ds(count * cols);
            dequantize(s, ds);
            ASSERT_EQ(std::memcmp(ds.data(), d0.data() + first * cols, ds.size() * sizeof(float)),
                      0)
                << where(t, rows, cols, r) << " rows " << first << "+" << count;
          }
        }
      }
    }
  }
}

TEST(QuantRepack, RejectsWhatItCannotHold) {
  std::vector<float> wf(8 * 64, 0.5f);
  const QuantizedMatrix q2 = quantize(Type::kQ2_K, std::vector<float>(8 * 256, 0.5f), 8, 256);
  EXPECT_FALSE(can_repack(Type::kQ2_K));
  EXPECT_THROW(repack(q2.view()), InputError);
  const QuantizedMatrix q8 = quantize(Type::kQ8_0, wf, 8, 64);
  EXPECT_THROW(repack(q8.view(), 1), InputError);
  EXPECT_THROW(repack(q8.view(), 17), InputError);
  const Repacked p = repack(q8.view());
  EXPECT_THROW(repack(p.view()), InputError);  // already repacked
  MatrixView bad = q2.view();
  bad.interleave = 4;
  EXPECT_THROW(validate(bad), InputError);
  const Repacked empty = repack(quantize(Type::kQ4_0, {}, 0, 64).view());
  std::vector<float> x(64, 1.0f), y;
  EXPECT_NO_THROW(gemv(empty.view(), x, y));
}

// The kernels on the repacked view against the scalar kernel on the plain matrix: bit-equal
// for the scalar ISA (it unpacks and runs the same kernel), within float summation order
// (2e-5 S', S' as in kernels_test.cpp) for SIMD.
TEST(QuantRepack, KernelsMatchScalarOnPlain) {
  std::mt19937_64 rng(2025);
  std::uniform_int_distribution<std::size_t> rows_d(1, 23), nb_d(1, 12);
  for (Type t : kTypes) {
    for (int shape = 0; shape < 4; ++shape) {
      const std::size_t rows = shape == 0 ? 8 : rows_d(rng);
      const std::size_t cols = shape == 1 ? 32 : 32 * nb_d(rng);
      const std::size_t r = shape == 3 ? 8 : kRepackRows;  // 8: the unpacking fallback
      const std::vector<float> wf = heavy_tailed(rng, rows * cols);
      const QuantizedMatrix m = quantize(t, wf, rows, cols);
      const Repacked p = repack(m.view(), r);
      const std::vector<float> wd = testing::dequantized(m.view());
      for (std::size_t n = 1; n <= 33; ++n) {
        const std::vector<float> x = heavy_tailed(rng, n * cols);
        const Activations a = Activations::prepare(traits(t).act, x, n, cols);
        const std::vector<float> xq = testing::act_dequantized(a);
        std::vector<double> tol(n * rows);
        for (std::size_t i = 0; i < n; ++i) {
          for (std::size_t row = 0; row < rows; ++row) {
            double s = 0, wmax = 0, xabs = 0;
            for (std::size_t k = 0; k < cols; ++k) {
              const double wv = std::fabs(double(wd[row * cols + k]));
              s += wv * std::fabs(double(x[i * cols + k]));
              wmax = std::max(wmax, wv);
              xabs += std::fabs(double(x[i * cols + k]));
            }
            tol[i * rows + row] = 2e-5 * (s + 1.5 * wmax * xabs) + 1e-30;
          }
        }
        std::vector<float> ref(n * rows);
        gemm(m.view(), a, ref, Isa::kScalar);
        for (Isa isa : available_isas()) {
          std::vector<float> y(n * rows, -1.0f);
          gemm(p.view(), a, y, isa);
          if (isa == Isa::kScalar) {
            ASSERT_TRUE(same_bits(y, ref)) << where(t, rows, cols, r) << " n=" << n;
            continue;
          }
          for (std::size_t k = 0; k < y.size(); ++k) {
            ASSERT_NEAR(y[k], ref[k], tol[k])
                << where(t, rows, cols, r) << " " << name(isa) << " n=" << n << " row "
                << k % rows << " act " << k / rows;
          }
        }
      }
    }
  }
}

TEST(QuantRepack, GemvDotAndThreadsAgree) {
  std::mt19937_64 rng(3);
  const std::size_t rows = 203, cols = 512;  // 50 groups of 4 and 3 tail rows
  for (Type t : kTypes) {
    const std::vector<float> wf = heavy_tailed(rng, rows * cols);
    const QuantizedMatrix m = quantize(t, wf, rows, cols);
    const Repacked p = repack(m.view());
    const std::vector<float> x = heavy_tailed(rng, 16 * cols);
    std::vector<float> y(rows), y2(rows);
    gemv(p.view(), std::span<const float>(x.data(), cols), y);
    gemm(p.view(), std::span<const float>(x.data(), cols), 1, y2);
    EXPECT_EQ(y, y2) << name(t);
    for (std::size_t r : {0u, 1u, 5u, 199u, 200u, 202u})
      EXPECT_EQ(dot(p.view(), r, std::span<const float>(x.data(), cols)), y[r]) << name(t) << r;
    for (std::size_t n : {1u, 3u, 16u}) {
      std::vector<float> y1(n * rows), yt(n * rows);
      {
        tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
        gemm(p.view(), std::span<const float>(x.data(), n * cols), n, y1);
      }
      {
        tbb::global_control two(tbb::global_control::max_allowed_parallelism, 2);
        gemm(p.view(), std::span<const float>(x.data(), n * cols), n, yt);
      }
      EXPECT_EQ(y1, yt) << name(t) << " n=" << n;
    }
  }
}

}  // namespace
}  // namespace k3::quant
