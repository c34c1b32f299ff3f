// gemm_f32_nn (quant/gemm_f32.h): every ISA available here is bitwise equal to a plain
// sequential std::fma loop over random shapes, strides and per-row depths; nothing outside the
// visible part of A, B and C is read or written; the result does not depend on the thread
// count, on a row's neighbours or on splitting k; bad shapes are refused.
#include "quant/gemm_f32.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "quant/isa.h"

namespace k3::quant {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The definition: one fma chain per element, from c's value, p = 0 .. k_i - 1.
void reference(std::size_t m, std::size_t n, const std::vector<std::size_t>& kr, const float* a,
               std::size_t lda, const float* b, std::size_t ldb, float* c, std::size_t ldc) {
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      float acc = c[i * ldc + j];
      for (std::size_t p = 0; p < kr[i]; ++p) acc = std::fma(a[i * lda + p], b[p * ldb + j], acc);
      c[i * ldc + j] = acc;
    }
  }
}

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// Finite values with the awkward ones mixed in: signed zeros, subnormals, wide magnitudes.
float value(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> kind(0, 99);
  std::normal_distribution<float> g(0.0f, 1.0f);
  switch (kind(rng)) {
    case 0:
      return 0.0f;
    case 1:
      return -0.0f;
    case 2:
      return g(rng) * 1e-39f;  // subnormal
    case 3:
      return g(rng) * 1e6f;
    default:
      return g(rng);
  }
}

// One random problem: A [m, lda] with NaN past each row's depth, B [kmax, ldb] with NaN in the
// columns past n, C [m, ldc] random with NaN past n (must stay untouched).
struct Problem {
  std::size_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  std::vector<std::size_t> kr;  // per-row depth (always filled; `per_row` says if passed)
  bool per_row = false;
  std::vector<float> a, b, c;

  std::span<const std::size_t> k_span() const {
    return per_row ? std::span<const std::size_t>(kr) : std::span<const std::size_t>();
  }
  std::size_t kmax() const { return kr.empty() ? 0 : *std::max_element(kr.begin(), kr.end()); }
  std::string describe() const {
    std::string s = "m=" + std::to_string(m) + " n=" + std::to_string(n) +
                    " k=" + std::to_string(k) + " lda=" + std::to_string(lda) +
                    " ldb=" + std::to_string(ldb) + " ldc=" + std::to_string(ldc);
    if (per_row) {
      s += " k_i=";
      for (std::size_t x : kr) s += std::to_string(x) + ",";
    }
    return s;
  }
};

// last_full: the last row has depth k (so it is the deepest) and k_per_row is passed.
Problem random_problem(std::mt19937_64& rng, std::size_t m, std::size_t n, std::size_t k,
                       bool last_full = false) {
  auto uni = [&rng](std::size_t lo, std::size_t hi) {
    return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
  };
  Problem pr;
  pr.m = m;
  pr.n = n;
  pr.k = k;
  pr.lda = k + uni(0, 1) * uni(1, 9);
  pr.ldb = n + uni(0, 1) * uni(1, 17);
  pr.ldc = n + uni(0, 1) * uni(1, 5);
  pr.kr.assign(m, k);
  switch (uni(0, 3)) {
    case 0:  // all rows use k
      break;
    case 1:  // random depths, zeros included
      pr.per_row = true;
      for (auto& x : pr.kr) x = uni(0, 3) == 0 ? 0 : uni(0, k);
      break;
    case 2: {  // causal chunk: rows are (token, head), token t sees k - tokens + t + 1
      pr.per_row = true;
      const std::size_t heads = uni(1, 16);
      const std::size_t tokens = (m + heads - 1) / heads;
      for (std::size_t i = 0; i < m; ++i) {
        const std::size_t t = i / heads;
        pr.kr[i] = k + t + 1 >= tokens ? std::min(k, k + t + 1 - tokens) : 0;
      }
      break;
    }
    default:  // head-major causal: consecutive rows differ by one position
      pr.per_row = true;
      for (std::size_t i = 0; i < m; ++i) pr.kr[i] = std::min(k, k / 2 + i % (k / 2 + 1));
      break;
  }
  if (last_full) {
    pr.per_row = true;
    pr.kr.back() = k;
  }
  const std::size_t kmax = pr.kmax();
  pr.a.assign(m * pr.lda, kNaN);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t p = 0; p < pr.kr[i]; ++p) pr.a[i * pr.lda + p] = value(rng);
  // B rows past kmax are not even allocated; the guard test checks that they are not read.
  pr.b.assign(kmax * pr.ldb, kNaN);
  for (std::size_t p = 0; p < kmax; ++p)
    for (std::size_t j = 0; j < n; ++j) pr.b[p * pr.ldb + j] = value(rng);
  pr.c.assign(m * pr.ldc, kNaN);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) pr.c[i * pr.ldc + j] = value(rng);
  return pr;
}

std::vector<float> expected(const Problem& pr) {
  std::vector<float> c = pr.c;
  reference(pr.m, pr.n, pr.kr, pr.a.data(), pr.lda, pr.b.data(), pr.ldb, c.data(), pr.ldc);
  return c;
}

std::vector<float> run(const Problem& pr, Isa isa) {
  std::vector<float> c = pr.c;
  gemm_f32_nn(pr.m, pr.n, pr.k, pr.a.data(), pr.lda, pr.b.data(), pr.ldb, c.data(), pr.ldc,
              pr.k_span(), isa);
  return c;
}

// Bitwise, NaN padding included (a NaN must stay the very same NaN).
void expect_same_bits(const std::vector<float>& want, const std::vector<float>& got,
                      std::size_t ldc, const std::string& where) {
  ASSERT_EQ(want.size(), got.size()) << where;
  for (std::size_t x = 0; x < want.size(); ++x) {
    if (bits(want[x]) != bits(got[x])) {
      ADD_FAILURE() << where << ": c[" << x / ldc << ", " << x % ldc << "] = " << got[x] << " (0x"
                    << std::hex << bits(got[x]) << "), expected " << want[x] << " (0x"
                    << bits(want[x]) << std::dec << ")";
      return;
    }
  }
}

std::vector<std::size_t> widths(std::mt19937_64& rng) {
  std::uniform_int_distribution<std::size_t> any(1, 300);
  return {1, 3, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 47, 48, 64, 80, 256, any(rng), any(rng)};
}

TEST(GemmF32, EveryIsaMatchesSequentialFmaBitwise) {
  std::mt19937_64 rng(20240611);
  std::uniform_int_distribution<std::size_t> mdist(1, 70), kdist(1, 300);
  int cases = 0;
  for (int round = 0; round < 3; ++round) {
    for (std::size_t n : widths(rng)) {
      const Problem pr = random_problem(rng, mdist(rng), n, kdist(rng));
      const std::vector<float> want = expected(pr);
      for (Isa isa : available_isas()) {
        expect_same_bits(want, run(pr, isa), pr.ldc, std::string(name(isa)) + " " + pr.describe());
      }
      ++cases;
    }
  }
  // Tiny and edge shapes: one row, one position, depth 0 everywhere.
  for (std::size_t m : {1u, 2u, 5u, 6u, 7u, 11u, 12u, 13u, 25u}) {
    for (std::size_t k : {1u, 2u, 255u, 256u, 257u, 513u}) {
      for (std::size_t n : {1u, 16u, 33u}) {
        const Problem pr = random_problem(rng, m, n, k);
        const std::vector<float> want = expected(pr);
        for (Isa isa : available_isas())
          expect_same_bits(want, run(pr, isa), pr.ldc,
                           std::string(name(isa)) + " " + pr.describe());
        ++cases;
      }
    }
  }
  EXPECT_GT(cases, 100);
}

// Depths over several depth blocks of B (kc is 512 positions at most, fewer for wide rows),
// rows ending inside and at the edges of blocks, and the engine's shapes.
TEST(GemmF32, LongDepthsAndWideRowsMatchSequentialFmaBitwise) {
  std::mt19937_64 rng(8);
  struct Shape {
    std::size_t m, n, k;
  };
  for (const Shape& sh : {Shape{30, 520, 1000}, Shape{64, 256, 1100}, Shape{13, 1030, 700},
                          Shape{100, 40, 1537}, Shape{25, 512, 512}}) {
    for (int trial = 0; trial < 2; ++trial) {
      const Problem pr = random_problem(rng, sh.m, sh.n, sh.k);
      const std::vector<float> want = expected(pr);
      for (Isa isa : available_isas())
        expect_same_bits(want, run(pr, isa), pr.ldc, std::string(name(isa)) + " " + pr.describe());
    }
  }
}

TEST(GemmF32, ZeroDepthRowsAndEmptyShapesAreUntouched) {
  std::mt19937_64 rng(5);
  Problem pr = random_problem(rng, 9, 20, 40);
  pr.per_row = true;
  std::fill(pr.kr.begin(), pr.kr.end(), 0);
  pr.kr[4] = 40;
  pr.c[0] = -0.0f;  // a row of depth 0 keeps even the sign of zero
  for (Isa isa : available_isas()) {
    const std::vector<float> c = run(pr, isa);
    expect_same_bits(expected(pr), c, pr.ldc, std::string(name(isa)));
    EXPECT_EQ(bits(c[0]), bits(-0.0f));
    std::vector<float> same = pr.c;
    gemm_f32_nn(0, pr.n, pr.k, pr.a.data(), pr.lda, pr.b.data(), pr.ldb, same.data(), pr.ldc, {},
                isa);
    gemm_f32_nn(pr.m, 0, pr.k, pr.a.data(), pr.lda, pr.b.data(), pr.ldb, same.data(), pr.ldc, {},
                isa);
    gemm_f32_nn(pr.m, pr.n, 0, pr.a.data(), pr.lda, pr.b.data(), pr.ldb, same.data(), pr.ldc, {},
                isa);
    expect_same_bits(pr.c, same, pr.ldc, "empty shapes");
  }
}

// A buffer whose last float is the last one before an inaccessible page, so any read past it
// (B rows past the deepest row, columns past n of the last row, A past a row's depth) faults.
class Guarded {
 public:
  Guarded(const std::vector<float>& v, std::size_t used) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    const std::size_t bytes = used * sizeof(float);
    size_ = (bytes + page - 1) / page * page + page;
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    base_ = static_cast<char*>(p);
    mprotect(base_ + size_ - page, page, PROT_NONE);
    data_ = reinterpret_cast<float*>(base_ + size_ - page - bytes);
    std::memcpy(data_, v.data(), bytes);
  }
  ~Guarded() { munmap(base_, size_); }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  float* data() const { return data_; }

 private:
  char* base_ = nullptr;
  std::size_t size_ = 0;
  float* data_ = nullptr;
};

TEST(GemmF32, ReadsNothingPastTheVisibleRowsAndColumns) {
  std::mt19937_64 rng(77);
  for (int trial = 0; trial < 40; ++trial) {
    const std::size_t n = widths(rng)[static_cast<std::size_t>(trial) % 19];
    // The last row is the deepest, so its last visible element ends A; B ends at column n-1 of
    // row kmax-1; C ends at column n-1 of the last row.
    const Problem pr = random_problem(rng, 1 + static_cast<std::size_t>(trial) % 31, n,
                                      1 + 7 * static_cast<std::size_t>(trial), true);
    const std::size_t kmax = pr.kmax();
    const Guarded a(pr.a, (pr.m - 1) * pr.lda + kmax);
    const Guarded b(pr.b, (kmax - 1) * pr.ldb + pr.n);
    const std::vector<float> want = expected(pr);
    for (Isa isa : available_isas()) {
      const Guarded c(pr.c, (pr.m - 1) * pr.ldc + pr.n);
      gemm_f32_nn(pr.m, pr.n, pr.k, a.data(), pr.lda, b.data(), pr.ldb, c.data(), pr.ldc,
                  pr.k_span(), isa);
      const std::vector<float> got(c.data(), c.data() + (pr.m - 1) * pr.ldc + pr.n);
      std::vector<float> w(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(got.size()));
      expect_same_bits(w, got, pr.ldc, std::string(name(isa)) + " " + pr.describe());
    }
  }
}

TEST(GemmF32, RowsDoNotDependOnNeighboursThreadsOrSplitDepth) {
  std::mt19937_64 rng(99);
  const Problem pr = random_problem(rng, 150, 256, 700);  // large enough to go parallel
  const std::vector<float> want = expected(pr);
  for (Isa isa : available_isas()) {
    const std::string where = std::string(name(isa)) + " " + pr.describe();
    for (int threads : {1, 2, 5}) {
      tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
      expect_same_bits(want, run(pr, isa), pr.ldc, where + " threads=" + std::to_string(threads));
    }
    for (int threads : {1, 3}) {  // inside the caller's arena
      tbb::task_arena arena(threads);
      std::vector<float> c;
      arena.execute([&] { c = run(pr, isa); });
      expect_same_bits(want, c, pr.ldc, where + " arena=" + std::to_string(threads));
    }
    // Each row alone (m = 1).
    std::vector<float> c = pr.c;
    for (std::size_t i = 0; i < pr.m; ++i) {
      gemm_f32_nn(1, pr.n, pr.kr[i], &pr.a[i * pr.lda], pr.lda, pr.b.data(), pr.ldb, &c[i * pr.ldc],
                  pr.ldc, {}, isa);
    }
    expect_same_bits(want, c, pr.ldc, where + " row by row");
    // Depth split in two calls: positions [0, s) then [s, k_i).
    c = pr.c;
    const std::size_t s = 301;
    std::vector<std::size_t> first(pr.m), second(pr.m);
    for (std::size_t i = 0; i < pr.m; ++i) {
      first[i] = std::min(s, pr.kr[i]);
      second[i] = pr.kr[i] - first[i];
    }
    gemm_f32_nn(pr.m, pr.n, s, pr.a.data(), pr.lda, pr.b.data(), pr.ldb, c.data(), pr.ldc, first,
                isa);
    gemm_f32_nn(pr.m, pr.n, pr.k - s, pr.a.data() + s, pr.lda, pr.b.data() + s * pr.ldb, pr.ldb,
                c.data(), pr.ldc, second, isa);
    expect_same_bits(want, c, pr.ldc, where + " split at " + std::to_string(s));
  }
}

TEST(GemmF32, DefaultIsaFollowsSetActiveIsa) {
  std::mt19937_64 rng(3);
  const Problem pr = random_problem(rng, 40, 72, 150);
  const std::vector<float> want = expected(pr);
  const Isa before = active_isa();
  for (Isa isa : available_isas()) {
    set_active_isa(isa);
    std::vector<float> c = pr.c;
    gemm_f32_nn(pr.m, pr.n, pr.k, pr.a.data(), pr.lda, pr.b.data(), pr.ldb, c.data(), pr.ldc,
                pr.k_span());
    expect_same_bits(want, c, pr.ldc, std::string(name(isa)));
  }
  set_active_isa(before);
}

TEST(GemmF32, RefusesBadShapes) {
  std::vector<float> a(64, 1.0f), b(64, 1.0f), c(64, 0.0f);
  auto message = [&](auto&& call) {
    try {
      call();
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no InputError");
  };
  EXPECT_EQ(message([&] { gemm_f32_nn(2, 4, 8, a.data(), 7, b.data(), 4, c.data(), 4); }),
            "quant: gemm_f32_nn [2 x 8] * [8 x 4]: lda = 7 is smaller than the row width 8");
  EXPECT_EQ(message([&] { gemm_f32_nn(2, 4, 8, a.data(), 8, b.data(), 3, c.data(), 4); }),
            "quant: gemm_f32_nn [2 x 8] * [8 x 4]: ldb = 3 is smaller than the row width 4");
  EXPECT_EQ(message([&] { gemm_f32_nn(2, 4, 8, a.data(), 8, b.data(), 4, c.data(), 2); }),
            "quant: gemm_f32_nn [2 x 8] * [8 x 4]: ldc = 2 is smaller than the row width 4");
  const std::size_t three[] = {1, 2, 3};
  EXPECT_EQ(message([&] { gemm_f32_nn(2, 4, 8, a.data(), 8, b.data(), 4, c.data(), 4, three); }),
            "quant: gemm_f32_nn [2 x 8] * [8 x 4]: k_per_row has 3 entries, expected 2");
  const std::size_t deep[] = {8, 9};
  EXPECT_EQ(message([&] { gemm_f32_nn(2, 4, 8, a.data(), 8, b.data(), 4, c.data(), 4, deep); }),
            "quant: gemm_f32_nn [2 x 8] * [8 x 4]: k_per_row[1] = 9 exceeds k");
}

}  // namespace
}  // namespace k3::quant
