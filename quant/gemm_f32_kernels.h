// Internal: the per-ISA pieces behind gemm_f32_nn (quant/gemm_f32.h). Not part of the public API.
//
// The driver (gemm_f32.cpp) walks the depth in blocks of kc positions; per block it may copy B
// into column strips (GemmF32B), then runs blocks of rows in parallel. Each ISA supplies a
// register tile, `Tile::run`, and shares the row-block code, gemm_f32_rows<Tile>: it splits
// the rows into tiles of up to Tile::kRows, packs their A values, and sweeps the column strips.
// Rows of a tile with different depths are peeled: the tile runs over the positions all its
// remaining rows share, then the rows that end there leave it and the rest continue, so every
// element still sees p = 0, 1, ... in order and no row is ever padded or masked.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace k3::quant::detail {

// One validated problem (see gemm_f32_nn); B is described per depth block by GemmF32B.
struct GemmF32Problem {
  std::size_t n = 0, k = 0;
  const float* a = nullptr;
  std::size_t lda = 0;
  float* c = nullptr;
  std::size_t ldc = 0;
  const std::size_t* k_row = nullptr;  // per-row depth, or null: every row uses k

  std::size_t row_k(std::size_t i) const { return k_row != nullptr ? k_row[i] : k; }
};

// B for positions [p0, p1) of one depth block: b[p, s * cols + j] is at
// data[s * strip + (p - p0) * ld + j] for column strip s. Either B itself (ld = ldb,
// strip = cols) or a copy in contiguous strips (ld = cols, strip = (p1 - p0) * cols).
struct GemmF32B {
  const float* data = nullptr;
  std::size_t ld = 0, strip = 0;
};

// Rows [i0, i1) of the product over positions [p0, p1): every column, each row up to its depth.
using GemmF32Rows = void (*)(const GemmF32Problem& pr, std::size_t i0, std::size_t i1,
                             std::size_t p0, std::size_t p1, const GemmF32B& b);

struct GemmF32Kernel {
  GemmF32Rows rows = nullptr;
  std::size_t tile_rows = 0;   // rows of the register tile
  std::size_t cols = 0;        // columns of the register tile (= of a B strip)
  std::size_t kc = 0;          // positions per depth block
  std::size_t block_rows = 0;  // rows per oneTBB task, a multiple of tile_rows
};

// Null `rows` when the ISA is not compiled in (non-x86 builds).
GemmF32Kernel gemm_f32_scalar();
GemmF32Kernel gemm_f32_avx2();
GemmF32Kernel gemm_f32_avx512();

// Tile must provide kRows, kCols and
//   static void run(std::size_t nr, const float* panel, std::size_t ldp, float* const* c,
//                   std::size_t j0, const float* b, std::size_t ldb, std::size_t count,
//                   std::size_t width);
// which, for each of the nr (<= kRows) rows r and columns j < width (<= kCols), applies
//   c[r][j0 + j] = fma(panel[r * ldp + q], b[q * ldb + j], c[r][j0 + j])
// for q = 0 .. count-1 in order. The panel is a copy of the stage's A values (ldp = count), so
// the inner loop reaches every row from a few pointers and one stride whatever rows the tile
// kept (one pointer per row would exhaust the GPRs), and rows of A that are a multiple of 4 KiB
// apart (lda = 2048) do not compete for the same L1 sets.
template <class Tile>
void gemm_f32_rows(const GemmF32Problem& pr, std::size_t i0, std::size_t i1, std::size_t p0,
                   std::size_t p1, const GemmF32B& b) {
  constexpr std::size_t kMr = Tile::kRows;
  // A stretch of positions [p0, p1) that rows c[0 .. nr-1] of a tile all still need.
  struct Stage {
    std::size_t p0, p1, nr;
    std::size_t panel;  // offset of its A values in `panel`
    float* c[kMr];
  };
  thread_local std::vector<float> panel;
  thread_local std::vector<Stage> stages;
  panel.resize(((i1 - i0 + kMr - 1) / kMr) * kMr * (p1 - p0));
  stages.clear();

  // Split every tile into stages and pack their A values once for all column strips.
  float* dst = panel.data();
  for (std::size_t t0 = i0; t0 < i1; t0 += kMr) {
    const float* a[kMr];
    float* c[kMr];
    std::size_t end[kMr];
    std::size_t nr = 0;
    for (std::size_t i = t0; i < std::min(i1, t0 + kMr); ++i) {
      const std::size_t e = std::min(pr.row_k(i), p1);
      if (e <= p0) continue;
      a[nr] = pr.a + i * pr.lda;
      c[nr] = pr.c + i * pr.ldc;
      end[nr++] = e;
    }
    for (std::size_t p = p0; nr > 0;) {
      const std::size_t e = *std::min_element(end, end + nr);
      Stage& s = stages.emplace_back();
      s.p0 = p;
      s.p1 = e;
      s.nr = nr;
      s.panel = static_cast<std::size_t>(dst - panel.data());
      std::copy_n(c, nr, s.c);
      for (std::size_t r = 0; r < nr; ++r) dst = std::copy(a[r] + p, a[r] + e, dst);
      p = e;
      std::size_t keep = 0;
      for (std::size_t r = 0; r < nr; ++r) {
        if (end[r] == e) continue;
        a[keep] = a[r];
        c[keep] = c[r];
        end[keep++] = end[r];
      }
      nr = keep;
    }
  }
  // Strips outer: a strip of B (kc x kCols) stays in L1 while every tile of the block uses it.
  for (std::size_t s0 = 0, j0 = 0; j0 < pr.n; ++s0, j0 += Tile::kCols) {
    const std::size_t width = std::min(Tile::kCols, pr.n - j0);
    const float* strip = b.data + s0 * b.strip;
    for (std::size_t x = 0; x < stages.size(); ++x) {
      // The next tile's C rows, from L2 or further, while this one computes.
      if (x + 1 < stages.size()) {
        const Stage& t = stages[x + 1];
        for (std::size_t r = 0; r < t.nr; ++r)
          for (std::size_t j = 0; j < width; j += 16) __builtin_prefetch(t.c[r] + j0 + j, 1);
      }
      const Stage& s = stages[x];
      const std::size_t count = s.p1 - s.p0;
      Tile::run(s.nr, panel.data() + s.panel, count, s.c, j0, strip + (s.p0 - p0) * b.ld, b.ld,
                count, width);
    }
  }
}

}  // namespace k3::quant::detail
