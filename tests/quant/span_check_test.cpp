// Sanitizer trees only (tests/quant/CMakeLists.txt): k3_quant's GEMM kernels are built without
// ASan's per-load checks there, and quant::gemm() checks every byte it hands them instead. A
// caller's freed or short buffer must still end the process with ASan's report.
#include <gtest/gtest.h>

#include <cctype>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "quant/activations.h"
#include "quant/kernels.h"
#include "quant/quantize.h"
#include "quant/repack.h"

namespace k3::quant {
namespace {

constexpr std::size_t kRows = 64, kCols = 256, kBatch = 4;

std::vector<float> values(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  return v;
}

// Each case on the widest kernels this CPU has: the uninstrumented ones where it has AVX-512.
class SpanCheck : public ::testing::TestWithParam<Type> {
 protected:
  // oneTBB's workers are running: the child re-executes the test instead of forking mid-state.
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_P(SpanCheck, FreedWeightsAreReported) {
  const auto x = values(kBatch * kCols);
  EXPECT_DEATH(
      {
        auto q = std::make_unique<QuantizedMatrix>(
            quantize(GetParam(), values(kRows * kCols), kRows, kCols));
        const MatrixView w = q->view();
        q.reset();
        std::vector<float> y(kBatch * kRows);
        gemm(w, x, kBatch, y);
      },
      "heap-use-after-free");
}

TEST_P(SpanCheck, AnOutputShorterThanItsSpanIsReported) {
  const auto q = quantize(GetParam(), values(kRows * kCols), kRows, kCols);
  const auto x = values(kBatch * kCols);
  EXPECT_DEATH(
      {
        std::vector<float> y(kBatch * kRows - 1);
        gemm(q.view(), x, kBatch, std::span<float>(y.data(), kBatch * kRows));
      },
      "heap-buffer-overflow");
}

INSTANTIATE_TEST_SUITE_P(Types, SpanCheck,
                         ::testing::Values(Type::kF32, Type::kBF16, Type::kQ8_0, Type::kQ3_K,
                                           Type::kMXFP4Packed, Type::kModelSlimInt8),
                         [](const auto& p) {
                           std::string s(name(p.param));
                           for (char& c : s)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

// Fp32 activations are read where they are: x must outlive the product.
TEST(SpanCheckActivations, Fp32ActivationsThatDiedBeforeTheirProductAreReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto q = quantize(Type::kBF16, values(kRows * kCols), kRows, kCols);
  EXPECT_DEATH(
      {
        auto x = std::make_unique<std::vector<float>>(values(kBatch * kCols));
        const Activations a = Activations::prepare(ActFormat::kF32, *x, kBatch, kCols);
        x.reset();
        std::vector<float> y(kBatch * kRows);
        gemm(q.view(), a, y);
      },
      "heap-use-after-free");
}

// The repacked layouts go through their own kernels.
TEST(SpanCheckRepacked, FreedVnniOrderWeightsAreReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto q = quantize(Type::kQ8_0, values(kRows * kCols), kRows, kCols);
  ASSERT_TRUE(can_repack_vnni(q.type));
  const auto x = values(kBatch * kCols);
  EXPECT_DEATH(
      {
        auto r = std::make_unique<Repacked>(repack_vnni(q.view()));
        const MatrixView w = r->view();
        r.reset();
        std::vector<float> y(kBatch * kRows);
        gemm(w, x, kBatch, y);
      },
      "heap-use-after-free");
}

}  // namespace
}  // namespace k3::quant
