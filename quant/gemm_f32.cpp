#include "quant/gemm_f32.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "quant/gemm_f32_kernels.h"

namespace k3::quant {
namespace detail {
namespace {

using std::size_t;

// The portable tile: std::fma rounds exactly like one lane of vfmadd, so this is bitwise the
// SIMD result, only slower.
struct ScalarTile {
  static constexpr size_t kRows = 4;
  static constexpr size_t kCols = 64;

  static void run(size_t nr, const float* panel, size_t ldp, float* const* c, size_t j0,
                  const float* b, size_t ldb, size_t count, size_t width) {
    for (size_t r = 0; r < nr; ++r) {
      float* cr = c[r] + j0;
      for (size_t q = 0; q < count; ++q) {
        const float ar = panel[r * ldp + q];
        const float* bq = b + q * ldb;
        for (size_t j = 0; j < width; ++j) cr[j] = std::fma(ar, bq[j], cr[j]);
      }
    }
  }
};

}  // namespace

GemmF32Kernel gemm_f32_scalar() {
  return {gemm_f32_rows<ScalarTile>, ScalarTile::kRows, ScalarTile::kCols, 256,
          8 * ScalarTile::kRows};
}

}  // namespace detail

namespace {

using std::size_t;

detail::GemmF32Kernel select(Isa isa) {
  detail::GemmF32Kernel k = detail::gemm_f32_scalar();
  if (isa >= Isa::kAvx2 && detail::gemm_f32_avx2().rows != nullptr) k = detail::gemm_f32_avx2();
  if (isa >= Isa::kAvx512 && detail::gemm_f32_avx512().rows != nullptr)
    k = detail::gemm_f32_avx512();
  return k;
}

std::string shape(size_t m, size_t n, size_t k) {
  return "quant: gemm_f32_nn [" + std::to_string(m) + " x " + std::to_string(k) + "] * [" +
         std::to_string(k) + " x " + std::to_string(n) + "]";
}

void check_ld(size_t m, size_t n, size_t k, const char* what, size_t ld, size_t need) {
  if (ld < need) {
    throw InputError(shape(m, n, k) + ": " + what + " = " + std::to_string(ld) +
                     " is smaller than the row width " + std::to_string(need));
  }
}

// Below this many multiply-adds (~10 us on one core) the product runs in the calling thread.
constexpr size_t kMinParallelFma = size_t{1} << 20;
// A depth block of B should stay in L2 next to the A panels: kc = this / (4 n), at most kern.kc.
constexpr size_t kBBlockBytes = size_t{512} << 10;
// Copy B's depth blocks only when at least this many register tiles of rows reuse them.
constexpr size_t kPackMinTiles = 2;

// The calling thread's buffer for the packed B blocks, kept between calls (a fresh buffer of
// a few hundred KiB per call costs as many page faults). A nested call on the same thread (a
// oneTBB worker that picks up another gemm_f32_nn while it waits) gets a buffer of its own.
class Scratch {
 public:
  explicit Scratch(size_t floats) {
    if (!in_use()) {
      in_use() = owner_ = true;
      buf_ = &shared();
    }
    buf_->resize(floats);
  }
  ~Scratch() {
    if (owner_) in_use() = false;
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* data() { return buf_->data(); }

 private:
  static bool& in_use() {
    thread_local bool used = false;
    return used;
  }
  static std::vector<float>& shared() {
    thread_local std::vector<float> buf;
    return buf;
  }
  bool owner_ = false;
  std::vector<float> own_;
  std::vector<float>* buf_ = &own_;
};

}  // namespace

void gemm_f32_nn(size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b,
                 size_t ldb, float* c, size_t ldc, std::span<const size_t> k_per_row, Isa isa) {
  if (static_cast<int>(isa) > static_cast<int>(detected_isa())) {
    throw UsageError("quant: gemm_f32_nn for " + std::string(name(isa)) +
                     " requested, but this CPU supports at most " +
                     std::string(name(detected_isa())));
  }
  check_ld(m, n, k, "lda", lda, k);
  check_ld(m, n, k, "ldb", ldb, n);
  check_ld(m, n, k, "ldc", ldc, n);
  size_t depth = m * k;  // sum of the row depths
  if (!k_per_row.empty()) {
    if (k_per_row.size() != m) {
      throw InputError(shape(m, n, k) + ": k_per_row has " + std::to_string(k_per_row.size()) +
                       " entries, expected " + std::to_string(m));
    }
    depth = 0;
    for (size_t i = 0; i < m; ++i) {
      if (k_per_row[i] > k) {
        throw InputError(shape(m, n, k) + ": k_per_row[" + std::to_string(i) +
                         "] = " + std::to_string(k_per_row[i]) + " exceeds k");
      }
      depth += k_per_row[i];
    }
  }
  if (m == 0 || n == 0 || depth == 0) return;

  const detail::GemmF32Problem pr{.n = n,
                                  .k = k,
                                  .a = a,
                                  .lda = lda,
                                  .c = c,
                                  .ldc = ldc,
                                  .k_row = k_per_row.empty() ? nullptr : k_per_row.data()};
  size_t kmax = k;
  if (!k_per_row.empty()) kmax = *std::max_element(k_per_row.begin(), k_per_row.end());

  // Rows are independent and each element's chain is fixed, so none of the choices below (depth
  // block, row block, packing, thread count) can change a bit of the result.
  const detail::GemmF32Kernel kern = select(isa);
  const bool parallel = depth * n >= kMinParallelFma;
  // Row blocks: the kernel's size, smaller if that leaves fewer than two per thread.
  size_t bm = kern.block_rows;
  if (parallel) {
    const auto threads = static_cast<size_t>(std::max(1, tbb::this_task_arena::max_concurrency()));
    const size_t want = (m + 2 * threads - 1) / (2 * threads);
    const size_t tiles = std::max<size_t>(1, (want + kern.tile_rows - 1) / kern.tile_rows);
    bm = std::min(bm, tiles * kern.tile_rows);
  }
  const size_t blocks = (m + bm - 1) / bm;
  // Depth blocks outer, all rows inner: a block of B (kc x n, at most kBBlockBytes) then stays
  // in each core's L2 while every row passes through it, so B is read from memory once (blocks
  // of rows outer would read all of B once per row block). With enough rows to amortise it, the
  // block is also copied into contiguous, cache-line-aligned strips of the tile width: rows of
  // the MLA cache are 1088 bytes apart and not aligned, so a 32-column strip would touch three
  // lines per position instead of two.
  const size_t kc = std::clamp<size_t>(kBBlockBytes / sizeof(float) / n / 16 * 16, 64, kern.kc);
  const bool pack = m >= kPackMinTiles * kern.tile_rows;
  const size_t strips = (n + kern.cols - 1) / kern.cols;
  constexpr size_t kAlign = 64 / sizeof(float);
  Scratch packed(pack ? strips * kc * kern.cols + kAlign : 0);
  float* base = packed.data();
  base += (kAlign - reinterpret_cast<std::uintptr_t>(base) / sizeof(float) % kAlign) % kAlign;

  for (size_t p0 = 0; p0 < kmax; p0 += kc) {
    const size_t p1 = std::min(kmax, p0 + kc);
    detail::GemmF32B bv{b + p0 * ldb, ldb, kern.cols};
    if (pack) {
      bv = {base, kern.cols, (p1 - p0) * kern.cols};
      auto pack_strips = [&](size_t s0, size_t s1) {
        for (size_t s = s0; s < s1; ++s) {
          const size_t j0 = s * kern.cols, width = std::min(kern.cols, n - j0);
          float* dst = base + s * bv.strip;
          for (size_t p = p0; p < p1; ++p, dst += kern.cols)
            std::copy_n(b + p * ldb + j0, width, dst);
        }
      };
      if (parallel) {
        tbb::parallel_for(
            tbb::blocked_range<size_t>(0, strips, 1),
            [&](const tbb::blocked_range<size_t>& r) { pack_strips(r.begin(), r.end()); });
      } else {
        pack_strips(0, strips);
      }
    }
    auto run_blocks = [&](size_t blk0, size_t blk1) {
      for (size_t blk = blk0; blk < blk1; ++blk)
        kern.rows(pr, blk * bm, std::min(m, (blk + 1) * bm), p0, p1, bv);
    };
    if (parallel && blocks > 1) {
      tbb::parallel_for(
          tbb::blocked_range<size_t>(0, blocks, 1),
          [&](const tbb::blocked_range<size_t>& r) { run_blocks(r.begin(), r.end()); });
    } else {
      run_blocks(0, blocks);
    }
  }
}

void gemm_f32_nn(size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b,
                 size_t ldb, float* c, size_t ldc, std::span<const size_t> k_per_row) {
  gemm_f32_nn(m, n, k, a, lda, b, ldb, c, ldc, k_per_row, active_isa());
}

}  // namespace k3::quant
