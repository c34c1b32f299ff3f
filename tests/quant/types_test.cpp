// Type traits, shape rules and the errors a user sees for a malformed weight matrix.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "quant/kernels.h"
#include "quant/quantize.h"
#include "quant/reference.h"
#include "quant/types.h"
#include "test_util.h"

namespace k3::quant {
namespace {

using testing::input_error_of;
using testing::view_over;

TEST(QuantTypes, GgufTraitsMatchGgml) {
  struct Expect {
    Type type;
    const char* name;
    std::size_t elems, bytes;
    int ggml;
  };
  const Expect expect[] = {
      {Type::kF32, "F32", 1, 4, 0},        {Type::kF16, "F16", 1, 2, 1},
      {Type::kBF16, "BF16", 1, 2, 30},     {Type::kQ8_0, "Q8_0", 32, 34, 8},
      {Type::kQ4_0, "Q4_0", 32, 18, 2},    {Type::kQ2_K, "Q2_K", 256, 84, 10},
      {Type::kQ3_K, "Q3_K", 256, 110, 11}, {Type::kMXFP4, "MXFP4", 32, 17, 39},
  };
  for (const auto& e : expect) {
    const TypeTraits& t = traits(e.type);
    EXPECT_EQ(t.name, e.name);
    EXPECT_EQ(t.block_elems, e.elems) << e.name;
    EXPECT_EQ(t.block_bytes, e.bytes) << e.name;
    EXPECT_EQ(t.ggml_type, e.ggml) << e.name;
    EXPECT_EQ(type_from_ggml(e.ggml), e.type) << e.name;
    EXPECT_EQ(type_from_name(e.name), e.type) << e.name;
  }
  EXPECT_FALSE(type_from_ggml(12).has_value());  // Q4_K: not a k3 format
  EXPECT_FALSE(type_from_name("Q5_0").has_value());
  EXPECT_EQ(traits(Type::kQ2_K).act, ActFormat::kQ8K);
  EXPECT_EQ(traits(Type::kQ4_0).act, ActFormat::kQ8Block32);
  EXPECT_EQ(traits(Type::kMXFP4Packed).act, ActFormat::kQ8Block32EvenOdd);
  EXPECT_FALSE(traits(Type::kBF16).integer_kernel);
}

// Every self-contained type converts rows through its traits entry, and the entry is that
// type's codec: a round trip stays within the type's rounding (an entry pointing at another
// type's codec reads the bytes in the wrong layout and misses by far). Types with side arrays
// have no entry, and dequantize_row says so.
TEST(QuantTypes, RowCodecsInTheTraitsTable) {
  for (std::size_t i = 0; i < kTypeCount; ++i) {
    const Type type = static_cast<Type>(i);
    const TypeTraits& t = traits(type);
    const bool self_contained = type != Type::kMXFP4Packed && type != Type::kModelSlimInt8 &&
                                type != Type::kModelSlimInt4;
    EXPECT_EQ(t.to_float != nullptr, self_contained) << t.name;
    EXPECT_EQ(t.from_float != nullptr, self_contained) << t.name;
    if (!self_contained) {
      float out[32];
      const std::uint8_t in[16] = {};
      EXPECT_THROW(dequantize_row(type, in, out, 32), InternalError) << t.name;
      continue;
    }
    const std::size_t n = 2 * t.block_elems;
    std::vector<float> x(n);
    for (std::size_t k = 0; k < n; ++k) x[k] = std::sin(0.37f * static_cast<float>(k)) * 3.0f;
    std::vector<std::uint8_t> q(n / t.block_elems * t.block_bytes);
    t.from_float(x.data(), q.data(), n);
    std::vector<float> y(n);
    t.to_float(q.data(), y.data(), n);
    double worst = 0;
    for (std::size_t k = 0; k < n; ++k) worst = std::max(worst, double(std::fabs(y[k] - x[k])));
    const double bound = type == Type::kF32    ? 0.0
                         : type == Type::kF16  ? 3e-3
                         : type == Type::kBF16 ? 2e-2
                         : type == Type::kQ8_0 ? 0.02
                                               : 1.5;  // 4-, 3- and 2-bit codes of values in [-3, 3]
    EXPECT_LE(worst, bound) << t.name;
  }
}

TEST(QuantTypes, DataBytes) {
  EXPECT_EQ(data_bytes(Type::kQ4_0, 3, 64), 3u * 2 * 18);
  EXPECT_EQ(data_bytes(Type::kQ2_K, 2, 512), 2u * 2 * 84);
  EXPECT_EQ(data_bytes(Type::kMXFP4Packed, 2, 64), 2u * 32);
  EXPECT_EQ(data_bytes(Type::kModelSlimInt8, 3, 32), 3u * 32);
  EXPECT_EQ(data_bytes(Type::kModelSlimInt4, 4, 64), 2u * 64);  // [rows/2, cols]
  EXPECT_EQ(data_bytes(Type::kBF16, 3, 5), 30u);
}

TEST(QuantTypes, KQuantRowMustBeMultipleOf256) {
  const std::string msg = input_error_of([] { check_shape(Type::kQ2_K, 4, 300); });
  EXPECT_NE(msg.find("Q2_K [4 x 300]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a multiple of 256"), std::string::npos) << msg;
  const std::string q3 = input_error_of([] { check_shape(Type::kQ3_K, 1, 128); });
  EXPECT_NE(q3.find("Q3_K [1 x 128]"), std::string::npos) << q3;
}

TEST(QuantTypes, BlockFormatsNeedMultiplesOf32) {
  for (Type t :
       {Type::kQ4_0, Type::kQ8_0, Type::kMXFP4, Type::kMXFP4Packed, Type::kModelSlimInt8}) {
    const std::string msg = input_error_of([t] { check_shape(t, 2, 48); });
    EXPECT_NE(msg.find(std::string(name(t)) + " [2 x 48]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("multiple of 32"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(check_shape(Type::kF16, 3, 7));
}

TEST(QuantTypes, Int4NeedsEvenRows) {
  const std::string msg = input_error_of([] { check_shape(Type::kModelSlimInt4, 3, 64); });
  EXPECT_NE(msg.find("MS_INT4 [3 x 64]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("odd"), std::string::npos) << msg;
}

TEST(QuantTypes, ValidateNamesTheBadSpan) {
  std::vector<std::uint8_t> data(18 * 2 - 1);
  const MatrixView v = view_over(Type::kQ4_0, 1, 64, data);
  std::string msg = input_error_of([&] { validate(v); });
  EXPECT_NE(msg.find("Q4_0 [1 x 64]: data has 35 bytes, expected 36"), std::string::npos) << msg;

  std::vector<std::uint8_t> q(2 * 32);
  std::vector<float> scale(1);
  const MatrixView ms = view_over(Type::kModelSlimInt8, 2, 32, q, scale);
  msg = input_error_of([&] { validate(ms); });
  EXPECT_NE(msg.find("weight_scale has 1 elements, expected 2"), std::string::npos) << msg;

  std::vector<std::uint8_t> q4(64);
  std::vector<float> s2(2), gs(2 * 2);
  MatrixView grp = view_over(Type::kModelSlimInt4, 2, 64, q4, s2, s2);
  grp.group_scale = gs;
  grp.group_size = 32;
  msg = input_error_of([&] { validate(grp); });
  EXPECT_NE(msg.find("weight_offset_second"), std::string::npos) << msg;
  grp.offset = {};
  grp.group_size = 48;
  msg = input_error_of([&] { validate(grp); });
  EXPECT_NE(msg.find("group_size 48"), std::string::npos) << msg;
  grp.group_size = 32;
  EXPECT_NO_THROW(validate(grp));

  std::vector<std::uint8_t> f(4 * 4), stray(1);
  MatrixView f32 = view_over(Type::kF32, 1, 4, f);
  f32.e8m0 = stray;
  msg = input_error_of([&] { validate(f32); });
  EXPECT_NE(msg.find("E8M0 scale array is not used by F32"), std::string::npos) << msg;
}

TEST(QuantTypes, KernelsRejectMismatchedShapes) {
  std::vector<float> w(4 * 64, 0.5f);
  const QuantizedMatrix m = quantize(Type::kQ8_0, w, 4, 64);
  std::vector<float> x(63), y(4);
  std::string msg = input_error_of([&] { gemv(m.view(), x, y); });
  EXPECT_NE(msg.find("from 63 floats"), std::string::npos) << msg;
  std::vector<float> x64(64), y3(3);
  msg = input_error_of([&] { gemv(m.view(), x64, y3); });
  EXPECT_NE(msg.find("Q8_0 [4 x 64] times 1 activation rows needs an output of 4 floats"),
            std::string::npos)
      << msg;
  const Activations wrong = Activations::prepare(ActFormat::kQ8K, std::vector<float>(256), 1, 256);
  msg = input_error_of([&] { gemm(m.view(), wrong, y); });
  EXPECT_NE(msg.find("needs Q8_32 activations"), std::string::npos) << msg;
}

TEST(QuantTypes, RowSliceKeepsSideArrays) {
  std::vector<float> w(4 * 64);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 13) - 6.0f;
  const QuantizedMatrix m = quantize(Type::kModelSlimInt4, w, 4, 64, {.group_size = 32});
  const MatrixView s = row_slice(m.view(), 2, 2);
  EXPECT_EQ(s.rows, 2u);
  EXPECT_EQ(s.data.data(), m.data.data() + 64);
  EXPECT_EQ(s.scale.data(), m.scale.data() + 2);
  EXPECT_EQ(s.group_scale.data(), m.group_scale.data() + 4);
  EXPECT_NO_THROW(validate(s));
  const std::string msg = input_error_of([&] { (void)row_slice(m.view(), 1, 2); });
  EXPECT_NE(msg.find("cannot take rows [1, 3)"), std::string::npos) << msg;
}

TEST(QuantTypes, IsaSelection) {
  const auto isas = available_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::kScalar);
  EXPECT_EQ(isas.back(), detected_isa());
  const Isa before = active_isa();
  set_active_isa(Isa::kScalar);
  EXPECT_EQ(active_isa(), Isa::kScalar);
  set_active_isa(before);
  EXPECT_EQ(isa_from_name("avx2"), Isa::kAvx2);
  EXPECT_EQ(isa_from_name("amx"), Isa::kAmx);
  EXPECT_FALSE(isa_from_name("sse").has_value());
  if (detected_isa() < Isa::kAvx512) {
    EXPECT_THROW(set_active_isa(Isa::kAvx512), UsageError);
  }
  if (detected_isa() < Isa::kAmx) {
    EXPECT_THROW(set_active_isa(Isa::kAmx), UsageError);
  }
}

}  // namespace
}  // namespace k3::quant
