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

#include "common/error.h"
#include "quant/activations.h"
#include "quant/kernels.h"
#include "quant/quantize.h"
#include "quant/reference.h"
#include "quant/repack.h"
#include "test_util.h"

namespace k3::quant {
namespace {

using testing::heavy_tailed;
using testing::random_bytes;

const Type kTypes[] = {Type::kQ8_0, Type::kQ4_0, Type::kMXFP4, Type::kQ2_K, Type::kQ3_K};

// A repacked layout under test: by `rows` rows with the block fields unchanged (repack), or
// the 16-row VNNI order (repack_vnni).
struct Layout {
  std::size_t rows;
  bool vnni = false;
};

Repacked repack_as(const MatrixView& w, Layout l) {
  return l.vnni ? repack_vnni(w) : repack(w, l.rows);
}

// The K-quants have the VNNI order only.
std::vector<Layout> layouts(Type t) {
  std::vector<Layout> out;
  if (can_repack(t)) out = {{2}, {4}, {8}, {16}};
  if (can_repack_vnni(t)) out.push_back({kVnniRows, true});
  return out;
}

// A row length of nb blocks.
std::size_t cols_of(Type t, std::size_t nb) { return traits(t).row_multiple * nb; }

// A plain view of `bytes` (which the caller keeps alive).
MatrixView plain_view(Type t, std::size_t rows, std::size_t cols,
                      const std::vector<std::uint8_t>& bytes) {
  MatrixView w;
  w.type = t;
  w.rows = rows;
  w.cols = cols;
  w.data = bytes;
  return w;
}

std::string where(Type t, std::size_t rows, std::size_t cols, Layout l) {
  return std::string(name(t)) + " [" + std::to_string(rows) + " x " + std::to_string(cols) +
         "] by " + std::to_string(l.rows) + (l.vnni ? " (VNNI order)" : "");
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST(QuantRepack, RoundTripAnyBytes) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<std::size_t> rows_d(0, 21), nb_d(1, 9);
  for (Type t : kTypes) {
    ASSERT_TRUE(can_repack(t) || can_repack_vnni(t));
    for (const Layout l : layouts(t)) {
      const std::size_t r = l.rows;
      for (int trial = 0; trial < 4; ++trial) {
        const std::size_t rows = trial == 0 ? r : rows_d(rng), cols = cols_of(t, nb_d(rng));
        const std::vector<std::uint8_t> bytes = random_bytes(rng, data_bytes(t, rows, cols));
        const MatrixView w = plain_view(t, rows, cols, bytes);
        const Repacked p = repack_as(w, l);
        const MatrixView v = p.view();
        EXPECT_EQ(v.interleave, r);
        EXPECT_EQ(v.vnni, l.vnni);
        EXPECT_EQ(p.data.size(), bytes.size());
        EXPECT_EQ(unpack(v), bytes) << where(t, rows, cols, l);
        if (rows >= r) {
          EXPECT_NE(p.data, bytes) << where(t, rows, cols, l);  // really moved
        }
        std::vector<float> d0(rows * cols), d1(rows * cols);
        dequantize(w, d0);
        dequantize(v, d1);
        EXPECT_TRUE(same_bits(d0, d1)) << where(t, rows, cols, l);
        // row slices on group boundaries and inside the plain tail
        const std::size_t full = rows / r * r;
        for (std::size_t first = 0; first < rows; ++first) {
          for (std::size_t count = 1; first + count <= rows; ++count) {
            const bool ok =
                first >= full || (first % r == 0 && (count % r == 0 || first + count >= full));
            if (!ok) {
              EXPECT_THROW(row_slice(v, first, count), InputError);
              continue;
            }
            const MatrixView s = row_slice(v, first, count);
            std::vector<float> ds(count * cols);
            dequantize(s, ds);
            ASSERT_EQ(std::memcmp(ds.data(), d0.data() + first * cols, ds.size() * sizeof(float)),
                      0)
                << where(t, rows, cols, l) << " rows " << first << "+" << count;
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
    // Shapes 0-3 by kRepackRows (3: by 8, the unpacking fallback); with the VNNI order also
    // shapes 0-2 and more than one batch-1 tile of kVnniTileGroups groups (4: 9 groups and 5
    // plain rows, 5: exactly 8 groups).
    std::vector<std::pair<int, Layout>> cases;
    if (can_repack(t))
      cases = {{0, {kRepackRows}}, {1, {kRepackRows}}, {2, {kRepackRows}}, {3, {8}}};
    if (can_repack_vnni(t)) {
      for (int shape : {0, 1, 2, 4, 5}) cases.push_back({shape, {kVnniRows, true}});
    }
    for (const auto& [shape, l] : cases) {
      const std::size_t rows = shape == 0 ? 8 : shape == 4 ? 149 : shape == 5 ? 128 : rows_d(rng);
      const std::size_t cols = cols_of(t, shape == 1 ? 1 : nb_d(rng));
      const std::vector<float> wf = heavy_tailed(rng, rows * cols);
      const QuantizedMatrix m = quantize(t, wf, rows, cols);
      const Repacked p = repack_as(m.view(), l);
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
            ASSERT_TRUE(same_bits(y, ref)) << where(t, rows, cols, l) << " n=" << n;
            continue;
          }
          for (std::size_t k = 0; k < y.size(); ++k) {
            ASSERT_NEAR(y[k], ref[k], tol[k])
                << where(t, rows, cols, l) << " " << name(isa) << " n=" << n << " row " << k % rows
                << " act " << k / rows;
          }
        }
      }
    }
  }
}

// The VNNI order keeps the plain layout's block order (block b into accumulator b mod 4), so a
// loader can repack without changing one output: bit-equal to the plain matrix on the same ISA,
// at every batch size (the GEMV, row and GEMM-tile paths of the plain layout), block counts with
// and without a tail of 1-3 blocks, and rows past the last whole group.
TEST(QuantRepack, VnniOrderGivesThePlainLayoutsBits) {
  std::mt19937_64 rng(19);
  for (Type t : {Type::kQ8_0, Type::kQ4_0, Type::kQ2_K, Type::kQ3_K}) {
    for (const auto& [rows, nb] :
         {std::pair<std::size_t, std::size_t>{128, 4}, {149, 13}, {203, 6}, {16, 1}, {272, 7}}) {
      const std::size_t cols = cols_of(t, nb);
      const QuantizedMatrix m = quantize(t, heavy_tailed(rng, rows * cols), rows, cols);
      const Repacked p = repack_vnni(m.view());
      const std::string what = where(t, rows, cols, {kVnniRows, true});
      for (std::size_t n : {1u, 2u, 3u, 4u, 5u, 6u, 7u, 11u, 12u, 16u, 17u, 33u, 64u}) {
        const std::vector<float> x = heavy_tailed(rng, n * cols);
        const Activations a = Activations::prepare(traits(t).act, x, n, cols);
        for (Isa isa : available_isas()) {
          std::vector<float> plain(n * rows), vnni(n * rows, -1.0f);
          gemm(m.view(), a, plain, isa);
          gemm(p.view(), a, vnni, isa);
          ASSERT_TRUE(same_bits(vnni, plain)) << what << " " << name(isa) << " n=" << n;
        }
      }
    }
  }
}

// stack_rows (an expert's gate and up as one matrix): every row of the stacked product has the
// bits of its own matrix's product, plain and in the VNNI order, on every ISA, ModelSlim's
// per-row scales and offsets and MS_INT4's group scales carried along with their rows.
TEST(QuantStack, RowsKeepTheirOwnMatricesBits) {
  std::mt19937_64 rng(23);
  struct Case {
    Type type;
    QuantizeOptions options;
  };
  QuantizeOptions groups;
  groups.group_size = 64;
  groups.asymmetric = true;
  QuantizeOptions offsets;
  offsets.asymmetric = true;
  const Case cases[] = {{Type::kQ8_0, {}},
                        {Type::kQ4_0, {}},
                        {Type::kQ2_K, {}},
                        {Type::kQ3_K, {}},
                        {Type::kModelSlimInt8, offsets},
                        {Type::kModelSlimInt4, groups}};
  for (const Case& c : cases) {
    const std::size_t cols =
        cols_of(c.type, 2) * (c.type == Type::kQ2_K || c.type == Type::kQ3_K ? 1 : 4);
    const std::size_t top_rows = 48, bottom_rows = 32;
    const QuantizedMatrix top =
        quantize(c.type, heavy_tailed(rng, top_rows * cols), top_rows, cols, c.options);
    const QuantizedMatrix bottom =
        quantize(c.type, heavy_tailed(rng, bottom_rows * cols), bottom_rows, cols, c.options);
    const QuantizedMatrix both = stack_rows(top.view(), bottom.view());
    ASSERT_EQ(both.rows, top_rows + bottom_rows);
    std::vector<MatrixView> stacked = {both.view()};
    Repacked packed;
    if (can_repack_vnni(c.type)) {
      packed = repack_vnni(both.view());
      stacked.push_back(packed.view());
    }
    for (std::size_t n : {1u, 3u, 8u}) {
      const std::vector<float> x = heavy_tailed(rng, n * cols);
      const Activations a = Activations::prepare(traits(c.type).act, x, n, cols);
      for (Isa isa : available_isas()) {
        std::vector<float> t(n * top_rows), b(n * bottom_rows), want;
        gemm(top.view(), a, t, isa);
        gemm(bottom.view(), a, b, isa);
        for (std::size_t i = 0; i < n; ++i) {
          want.insert(want.end(), t.begin() + i * top_rows, t.begin() + (i + 1) * top_rows);
          want.insert(want.end(), b.begin() + i * bottom_rows, b.begin() + (i + 1) * bottom_rows);
        }
        for (const MatrixView& v : stacked) {
          std::vector<float> got(n * both.rows, -1.0f);
          gemm(v, a, got, isa);
          ASSERT_TRUE(same_bits(got, want))
              << name(c.type) << (v.vnni ? " VNNI" : " plain") << " " << name(isa) << " n=" << n;
        }
      }
    }
  }
}

TEST(QuantStack, RejectsMatricesThatDoNotStack) {
  std::mt19937_64 rng(29);
  const QuantizedMatrix q8 = quantize(Type::kQ8_0, heavy_tailed(rng, 16 * 64), 16, 64);
  const QuantizedMatrix q4 = quantize(Type::kQ4_0, heavy_tailed(rng, 16 * 64), 16, 64);
  const QuantizedMatrix wide = quantize(Type::kQ8_0, heavy_tailed(rng, 16 * 96), 16, 96);
  EXPECT_THROW(stack_rows(q8.view(), q4.view()), InputError);
  EXPECT_THROW(stack_rows(q8.view(), wide.view()), InputError);
  const Repacked packed = repack_vnni(q8.view());
  EXPECT_THROW(stack_rows(packed.view(), q8.view()), InputError);
}

TEST(QuantRepack, GemvDotAndThreadsAgree) {
  std::mt19937_64 rng(3);
  // 50 groups of 4 and 3 tail rows; 12 VNNI groups (a full batch-1 tile and 4 more) and 11.
  const std::size_t rows = 203, cols = 512;
  for (Type t : kTypes) {
    for (const Layout l : {Layout{kRepackRows}, Layout{kVnniRows, true}}) {
      if (l.vnni ? !can_repack_vnni(t) : !can_repack(t)) continue;
      const std::string what = where(t, rows, cols, l);
      const std::vector<float> wf = heavy_tailed(rng, rows * cols);
      const QuantizedMatrix m = quantize(t, wf, rows, cols);
      const Repacked p = repack_as(m.view(), l);
      const std::vector<float> x = heavy_tailed(rng, 16 * cols);
      std::vector<float> y(rows), y2(rows);
      gemv(p.view(), std::span<const float>(x.data(), cols), y);
      gemm(p.view(), std::span<const float>(x.data(), cols), 1, y2);
      EXPECT_EQ(y, y2) << what;
      for (std::size_t r : {0u, 1u, 5u, 199u, 200u, 202u})
        EXPECT_EQ(dot(p.view(), r, std::span<const float>(x.data(), cols)), y[r]) << what << r;
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
        EXPECT_EQ(y1, yt) << what << " n=" << n;
        if (!l.vnni) continue;
        // The VNNI kernels add a row's blocks in one order at every batch size: the last
        // activation row of the batch gives what it gives alone, bit for bit (whole groups).
        std::vector<float> alone(rows);
        gemv(p.view(), std::span<const float>(x.data() + (n - 1) * cols, cols), alone);
        for (std::size_t r = 0; r < rows / kVnniRows * kVnniRows; ++r)
          ASSERT_EQ(y1[(n - 1) * rows + r], alone[r]) << what << " n=" << n << " row " << r;
      }
    }
  }
}

// The VNNI order byte by byte, as quant/repack.h documents it, on codes that name their row
// and element.
TEST(QuantRepack, VnniOrderIsTheDocumentedOne) {
  const std::size_t rows = kVnniRows, cols = 64;
  for (Type t : {Type::kQ4_0, Type::kQ8_0}) {
    const std::size_t bb = traits(t).block_bytes;
    std::vector<std::uint8_t> plain(rows * 2 * bb);
    // Element e of block b in row r: Q4_0 code (e + r + b) % 16, Q8_0 value 3e + r - 50 + b.
    auto q4_code = [](std::size_t r, std::size_t b, std::size_t e) {
      return static_cast<std::uint8_t>((e + r + b) % 16);
    };
    auto q8_value = [](std::size_t r, std::size_t b, std::size_t e) {
      return static_cast<std::int8_t>(3 * static_cast<int>(e) + static_cast<int>(r + b) - 50);
    };
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t b = 0; b < 2; ++b) {
        std::uint8_t* blk = plain.data() + (r * 2 + b) * bb;
        blk[0] = static_cast<std::uint8_t>(r);  // f16 scale bytes, any value
        blk[1] = static_cast<std::uint8_t>(0x30 + b);
        for (std::size_t e = 0; e < 32; ++e) {
          if (t == Type::kQ8_0) {
            blk[2 + e] = static_cast<std::uint8_t>(q8_value(r, b, e));
          } else {
            blk[2 + e % 16] |= static_cast<std::uint8_t>(q4_code(r, b, e) << (e < 16 ? 0 : 4));
          }
        }
      }
    }
    const Repacked p = repack_vnni(plain_view(t, rows, cols, plain));
    const std::size_t payload = t == Type::kQ8_0 ? 512 : 256;
    for (std::size_t b = 0; b < 2; ++b) {
      const std::uint8_t* sup = p.data.data() + b * rows * bb;
      for (std::size_t r = 0; r < rows; ++r) {
        EXPECT_EQ(sup[payload + 2 * r], r) << name(t);
        EXPECT_EQ(sup[payload + 2 * r + 1], 0x30 + b) << name(t);
        for (std::size_t j = 0; j < 4; ++j) {
          if (t == Type::kQ8_0) {
            for (std::size_t k = 0; k < 8; ++k)
              EXPECT_EQ(sup[64 * k + 4 * r + j],
                        static_cast<std::uint8_t>(q8_value(r, b, 4 * k + j) + 128))
                  << "Q8_0 block " << b << " row " << r << " element " << 4 * k + j;
          } else {
            for (std::size_t c = 0; c < 4; ++c)
              EXPECT_EQ(sup[64 * c + 4 * r + j],
                        q4_code(r, b, 8 * c + j) | q4_code(r, b, 8 * c + 4 + j) << 4)
                  << "Q4_0 block " << b << " row " << r << " chunk " << c << " byte " << j;
          }
        }
      }
    }
  }
}

// The K-quants' VNNI order, field by field as quant/repack.h documents it, against ggml's
// block layout read element by element, on random bytes (every bit pattern is a valid block).
TEST(QuantRepack, KQuantVnniOrderIsTheDocumentedOne) {
  std::mt19937_64 rng(23);
  const std::size_t rows = kVnniRows, blocks = 2, cols = 256 * blocks;
  for (Type t : {Type::kQ2_K, Type::kQ3_K}) {
    const bool q3 = t == Type::kQ3_K;
    const std::size_t bb = traits(t).block_bytes;
    const std::vector<std::uint8_t> plain = random_bytes(rng, rows * blocks * bb);
    const Repacked p = repack_vnni(plain_view(t, rows, cols, plain));
    // ggml: element e = 128 h + 32 s + l has its low bits in qs[32 h + l] >> 2 s and (Q3_K)
    // its high bit in hmask[e % 32] >> (e / 32); Q3_K scale j is 6 bits, low nibble in
    // scales[j % 8] (>> 4 from j = 8), top bits in scales[8 + j % 4] >> 2 (j / 4).
    const std::size_t qs_at = q3 ? 32 : 16, d_at = q3 ? 108 : 80;
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::uint8_t* sup = p.data.data() + b * rows * bb;
      for (std::size_t r = 0; r < rows; ++r) {
        const std::uint8_t* blk = plain.data() + (r * blocks + b) * bb;
        const std::string at =
            std::string(name(t)) + " block " + std::to_string(b) + " row " + std::to_string(r);
        for (std::size_t e = 0; e < 256; ++e) {
          const std::size_t tq = e / 16, s = e % 16 / 4, j = e % 4;
          const unsigned low = (blk[qs_at + 32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
          ASSERT_EQ((sup[64 * tq + 4 * r + j] >> (2 * s)) & 3, low) << at << " element " << e;
          if (!q3) continue;
          const unsigned high = (blk[e % 32] >> (e / 32)) & 1;
          // quad q = e / 4, bit 4r + j of its 8-byte mask
          const std::size_t bit = 4 * r + j;
          ASSERT_EQ((sup[1024 + 8 * (e / 4) + bit / 8] >> (bit % 8)) & 1, high)
              << at << " element " << e;
        }
        const std::size_t order[4] = {0, 2, 1, 3};
        for (std::size_t k = 0; k < 4; ++k) {
          for (std::size_t i = 0; i < 4; ++i) {
            const std::size_t jb = 4 * k + order[i];
            if (!q3) {
              EXPECT_EQ(sup[1024 + 64 * k + 4 * r + i], blk[jb]) << at << " scale " << jb;
              continue;
            }
            const unsigned code = ((jb < 8 ? blk[96 + jb] & 15 : blk[96 + jb - 8] >> 4) |
                                   ((blk[104 + jb % 4] >> (2 * (jb / 4))) & 3) << 4);
            const unsigned v = code ^ 32;
            const std::uint8_t ab = sup[1536 + (k < 2 ? 0 : 64) + 4 * r + i];
            const std::uint8_t c = sup[1536 + 128 + 4 * r + i];
            EXPECT_EQ((ab >> (4 * (k % 2))) & 15, v & 15) << at << " scale " << jb;
            EXPECT_EQ((c >> (2 * k)) & 3, v >> 4) << at << " scale " << jb;
          }
        }
        const std::size_t d_vnni = q3 ? 1728 : 1280;
        EXPECT_EQ(std::memcmp(sup + d_vnni + 2 * r, blk + d_at, 2), 0) << at << " d";
        if (!q3) {
          EXPECT_EQ(std::memcmp(sup + 1312 + 2 * r, blk + 82, 2), 0) << at << " dmin";
        }
      }
    }
  }
}

TEST(QuantRepack, VnniRejectsWhatItCannotHold) {
  const QuantizedMatrix mx = quantize(Type::kMXFP4, std::vector<float>(16 * 64, 0.5f), 16, 64);
  EXPECT_FALSE(can_repack_vnni(Type::kMXFP4));
  EXPECT_THROW(repack_vnni(mx.view()), InputError);
  const QuantizedMatrix q4 = quantize(Type::kQ4_0, std::vector<float>(16 * 64, 0.5f), 16, 64);
  const Repacked p = repack_vnni(q4.view());
  EXPECT_THROW(repack_vnni(p.view()), InputError);  // already repacked
  EXPECT_THROW(repack(p.view()), InputError);
  MatrixView bad = q4.view();
  bad.vnni = true;  // without the 16-row interleave
  EXPECT_THROW(validate(bad), InputError);
  bad.interleave = 8;
  EXPECT_THROW(validate(bad), InputError);
  MatrixView bad_type = repack(mx.view(), 16).view();
  bad_type.vnni = true;
  EXPECT_THROW(validate(bad_type), InputError);
  EXPECT_NE(describe(p.view()).find("VNNI"), std::string::npos);
  // The messages name the matrix and what the VNNI order needs.
  const std::string mx_msg = testing::input_error_of([&] { repack_vnni(mx.view()); });
  EXPECT_NE(mx_msg.find("MXFP4 [16 x 64]"), std::string::npos) << mx_msg;
  EXPECT_NE(mx_msg.find("Q8_0, Q4_0, Q2_K and Q3_K only"), std::string::npos) << mx_msg;
  const std::string again = testing::input_error_of([&] { repack_vnni(p.view()); });
  EXPECT_NE(again.find("already repacked"), std::string::npos) << again;
  const std::string flag = testing::input_error_of([&] { validate(bad_type); });
  EXPECT_NE(flag.find("VNNI order needs Q8_0, Q4_0, Q2_K or Q3_K rows interleaved by 16"),
            std::string::npos)
      << flag;
}

}  // namespace
}  // namespace k3::quant
