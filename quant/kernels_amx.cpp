// AMX kernels (Isa::kAmx): Q8_0 in the VNNI order (quant/repack.h) at 2 or more activation rows.
// As in kernels_avx512*.cpp, the ISA is enabled per function with a target attribute.
//
// A VNNI-order super-block is exactly an AMX B tile: 16 weight rows as the 16 int32 columns, 4
// consecutive codes of a row in each 32-bit column entry, one 64-byte tile row per 4 elements, so
// a 32-element block is an 8 x 64 tile loaded straight from the matrix. The activation rows
// (up to 16) of the same block are the A tile (m x 32 signed bytes), and tdpbsud gives every
// (activation row, weight row) integer dot of the block in one instruction. Per-block scales
// need the products out of the tile after each block: one tile store, then per activation row
// one zmm of 16 weight rows through the float steps of the AVX-512 VNNI-order kernels, in their
// block order (block b into accumulator b mod 4), so every output has their bits.
//
// (An earlier attempt, docs/PERFORMANCE.md "Tried and dropped", put the weights in the A
// tile against the 16-row interleaved activations: its float epilogue ran once per weight row,
// half-empty at 8 activations, and did not pay. Here it runs once per activation row.)
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "quant/blocks.h"
#include "quant/kernel_table.h"

#if defined(__x86_64__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#define K3_TARGET_AMX \
  "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,amx-tile,amx-int8"
#define K3_AMX __attribute__((target(K3_TARGET_AMX)))

namespace k3::quant::detail {
namespace {

using std::size_t;
using std::uint8_t;

// A Q8_0 super-block in the VNNI order: 8 x 64 bytes of codes (value + 128), then the 16 rows'
// f16 scales.
constexpr size_t kSuper = 16 * layout::kQ8_0Bytes;
constexpr size_t kScales = kSuper - 32;
constexpr std::int32_t kOffset = 128;
constexpr size_t kPrefetch = 4096;  // as the AVX-512 VNNI-order streams (kVnniPrefetch)
constexpr size_t kMaxRows = 16;     // activation rows per A tile

// Tiles: 0 = activations (m x 32 bytes); 1, 2 = two groups' codes (8 x 64); 3, 4 = their
// products (m x 16 int32).
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

TileConfig tile_config(size_t m) {
  TileConfig c;
  c.rows[0] = static_cast<std::uint8_t>(m);
  c.colsb[0] = 32;
  for (int t : {1, 2}) {
    c.rows[t] = 8;
    c.colsb[t] = 64;
  }
  for (int t : {3, 4}) {
    c.rows[t] = static_cast<std::uint8_t>(m);
    c.colsb[t] = 64;
  }
  return c;
}

// The float steps of vnni_accumulate for the m activation rows of one group and block:
// acc[i][k] += float(S_i) * (d_w * d_x,i), where the product tile started from -isum_i * 128
// (so S_i is the exact signed dot) and dx[i] holds d_x,i in every lane.
K3_AMX inline __attribute__((always_inline)) void epilogue(const std::int32_t (*prod)[16],
                                                           const uint8_t* super,
                                                           const float (*dx)[16], size_t m,
                                                           size_t k, __m512 (*acc)[4]) {
  const __m512 dw =
      _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(super + kScales)));
  for (size_t i = 0; i < m; ++i) {
    const __m512 s = _mm512_cvtepi32_ps(_mm512_load_si512(prod[i]));
    acc[i][k] = _mm512_fmadd_ps(s, _mm512_mul_ps(dw, _mm512_load_ps(dx[i])), acc[i][k]);
  }
}

// The seed (-isum * 128) and scale of each activation row [m0, m0 + m) at block b, as 16 lanes.
K3_AMX inline void store_seeds(const ActView& a, size_t m0, size_t m, size_t b,
                               std::int32_t (*seed)[16], float (*dx)[16]) {
  for (size_t i = 0; i < m; ++i) {
    const size_t ab = (m0 + i) * a.blocks + b;
    _mm512_store_si512(seed[i], _mm512_set1_epi32(a.nisum[ab] * kOffset));
    _mm512_store_ps(dx[i], _mm512_set1_ps(a.d[ab]));
  }
}

using Accumulators = __m512[kVnniTileGroups][kMaxRows][4];  // [group][activation row][b mod 4]

K3_AMX inline __attribute__((always_inline)) void zero(Accumulators& acc, size_t groups, size_t m) {
  for (size_t s = 0; s < groups; ++s)
    for (size_t i = 0; i < m; ++i)
      for (int k = 0; k < 4; ++k) acc[s][i][k] = _mm512_setzero_ps();
}

// Each row's (acc0 + acc1) + (acc2 + acc3), the AVX-512 kernels' last step, to y [m, ldy].
K3_AMX inline __attribute__((always_inline)) void store_rows(const Accumulators& acc, size_t groups,
                                                             size_t m, float* y, size_t ldy) {
  for (size_t s = 0; s < groups; ++s) {
    for (size_t i = 0; i < m; ++i) {
      const __m512 row = _mm512_add_ps(_mm512_add_ps(acc[s][i][0], acc[s][i][1]),
                                       _mm512_add_ps(acc[s][i][2], acc[s][i][3]));
      _mm512_storeu_ps(y + i * ldy + 16 * s, row);
    }
  }
}

// Near a stream's end, the prefetch goes to the stream that continues it in the next tile
// (`groups` groups on), as in the AVX-512 VNNI-order kernels.
inline size_t prefetch_jump(size_t b, size_t gstride, size_t groups) {
  return b * kSuper + kPrefetch >= gstride ? (groups - 1) * gstride : 0;
}

// Block b's super-blocks of the group at p0 and, with `pair`, of the next one, into L2.
K3_AMX inline __attribute__((always_inline)) void prefetch_pair(const uint8_t* p0, size_t gstride,
                                                                bool pair, size_t jump) {
  for (size_t t = 0; t < (pair ? 2u : 1u); ++t) {
    const char* pf = reinterpret_cast<const char*>(p0 + t * gstride) + kPrefetch + jump;
    for (size_t o = 0; o < kSuper; o += 64) _mm_prefetch(pf + o, _MM_HINT_T1);
  }
}

// Activation rows [m0, m0 + m) against `groups` consecutive 16-row groups from g0, the block
// loop outside so the groups are read as side-by-side streams (prefetched on the first pass).
K3_AMX void q8_rows(const uint8_t* g0, size_t gstride, size_t groups, const ActView& a, size_t m0,
                    size_t m, bool stream, float* y, size_t ldy) {
  const size_t nb = a.blocks;
  __m512 acc[kVnniTileGroups][kMaxRows][4];
  zero(acc, groups, m);
  // A pair of groups' products is read back after the next pair's tile work (the next block's
  // first pair for the last one): a load right behind a tile store waits for the store to
  // commit (bench_quant Q8_0_V16 batch 8, cold: -3 to -6 %).
  alignas(64) std::int32_t prod[2][2][kMaxRows][16];
  // The seeds (-isum * 128 of each activation row) and scales are stored a block ahead, for the
  // same reason; a block's scales can be read in the next block, hence three.
  alignas(64) std::int32_t seed[2][kMaxRows][16];
  alignas(64) float dx[3][kMaxRows][16];
  struct Pending {
    const uint8_t* p0 = nullptr;  // the first group's super-block (null: none pending)
    size_t s = 0, b = 0, slot = 0;
    bool pair = false;
  } pending;
  const auto finish = [&](const Pending& q) K3_AMX {
    const float(*d)[16] = dx[q.b % 3];
    epilogue(prod[q.slot][0], q.p0, d, m, q.b % 4, acc[q.s]);
    if (q.pair) epilogue(prod[q.slot][1], q.p0 + gstride, d, m, q.b % 4, acc[q.s + 1]);
  };
  if (nb > 0) store_seeds(a, m0, m, 0, seed[0], dx[0]);
  size_t slot = 0;
  for (size_t b = 0; b < nb; ++b) {
    const size_t cur = b % 2;
    if (b + 1 < nb) store_seeds(a, m0, m, b + 1, seed[cur ^ 1], dx[(b + 1) % 3]);
    _tile_loadd(0, a.qs + 32 * (m0 * nb + b), static_cast<long>(32 * nb));
    const size_t jump = prefetch_jump(b, gstride, groups);
    for (size_t s = 0; s < groups; s += 2, slot ^= 1) {
      const uint8_t* p0 = g0 + s * gstride + b * kSuper;
      const uint8_t* p1 = p0 + gstride;
      const bool pair = s + 1 < groups;
      if (stream) prefetch_pair(p0, gstride, pair, jump);
      _tile_loadd(1, p0, 64);
      _tile_loadd(3, seed[cur], 64);
      _tile_dpbsud(3, 0, 1);
      if (pair) {
        _tile_loadd(2, p1, 64);
        _tile_loadd(4, seed[cur], 64);
        _tile_dpbsud(4, 0, 2);
      }
      _tile_stored(3, prod[slot][0], 64);
      if (pair) _tile_stored(4, prod[slot][1], 64);
      if (pending.p0 != nullptr) finish(pending);
      pending = {p0, s, b, slot, pair};
    }
  }
  if (pending.p0 != nullptr) finish(pending);
  store_rows(acc, groups, m, y + m0 * ldy, ldy);
}

// q8_rows at more than 8 rows: each pair's products read back right after their tile store
// (deferring them measured slower there: bench_quant Q8_0_V16 batch 16 +2-16 %, with the
// accumulators of 16 rows filling L1; one template for both orders measured slower at 16 rows
// too, hence two functions).
K3_AMX void q8_rows_direct(const uint8_t* g0, size_t gstride, size_t groups, const ActView& a,
                           size_t m0, size_t m, bool stream, float* y, size_t ldy) {
  const size_t nb = a.blocks;
  __m512 acc[kVnniTileGroups][kMaxRows][4];
  zero(acc, groups, m);
  alignas(64) std::int32_t prod[2][kMaxRows][16];
  alignas(64) std::int32_t seed[kMaxRows][16];  // -isum * 128 of each activation row
  alignas(64) float dx[kMaxRows][16];
  for (size_t b = 0; b < nb; ++b) {
    const size_t k = b % 4;
    for (size_t i = 0; i < m; ++i) {
      const size_t ab = (m0 + i) * nb + b;
      _mm512_store_si512(seed[i], _mm512_set1_epi32(a.nisum[ab] * kOffset));
      _mm512_store_ps(dx[i], _mm512_set1_ps(a.d[ab]));
    }
    _tile_loadd(0, a.qs + 32 * (m0 * nb + b), static_cast<long>(32 * nb));
    const size_t jump = prefetch_jump(b, gstride, groups);
    for (size_t s = 0; s < groups; s += 2) {
      const uint8_t* p0 = g0 + s * gstride + b * kSuper;
      const uint8_t* p1 = p0 + gstride;
      const bool pair = s + 1 < groups;
      if (stream) prefetch_pair(p0, gstride, pair, jump);
      _tile_loadd(1, p0, 64);
      _tile_loadd(3, seed, 64);
      _tile_dpbsud(3, 0, 1);
      if (pair) {
        _tile_loadd(2, p1, 64);
        _tile_loadd(4, seed, 64);
        _tile_dpbsud(4, 0, 2);
      }
      _tile_stored(3, prod[0], 64);
      if (pair) _tile_stored(4, prod[1], 64);
      epilogue(prod[0], p0, dx, m, k, acc[s]);
      if (pair) epilogue(prod[1], p1, dx, m, k, acc[s + 1]);
    }
  }
  store_rows(acc, groups, m, y + m0 * ldy, ldy);
}

// Rows [r0, r0 + nr) of a Q8_0 VNNI-order view (whole groups, at most kVnniTileGroups): batch 1
// through the AVX-512 GEMV (memory-bound; tiles would not help), more rows in A tiles of 16.
K3_AMX void q8_vnni_tile(const MatrixView& w, size_t r0, size_t nr, const ActView& a, float* y,
                         size_t ldy) {
  if (a.rows == 1) {
    avx512_kernels().vnni[static_cast<size_t>(Type::kQ8_0)](w, r0, nr, a, y, ldy);
    return;
  }
  const size_t gstride = a.blocks * kSuper;
  const uint8_t* g0 = w.data.data() + r0 / 16 * gstride;
  for (size_t m0 = 0; m0 < a.rows; m0 += kMaxRows) {
    const size_t m = std::min(kMaxRows, a.rows - m0);
    const TileConfig config = tile_config(m);
    _tile_loadconfig(&config);
    if (m <= 8) {
      q8_rows(g0, gstride, nr / 16, a, m0, m, m0 == 0, y + r0, ldy);
    } else {
      q8_rows_direct(g0, gstride, nr / 16, a, m0, m, m0 == 0, y + r0, ldy);
    }
  }
  _tile_release();
}

KernelTable make_table() {
  KernelTable t;
  t.vnni[static_cast<size_t>(Type::kQ8_0)] = q8_vnni_tile;
  return t;
}

}  // namespace

const KernelTable& amx_kernels() {
  static const KernelTable table = make_table();
  return table;
}

}  // namespace k3::quant::detail

#else  // not x86-64

namespace k3::quant::detail {
const KernelTable& amx_kernels() {
  static const KernelTable table{};
  return table;
}
}  // namespace k3::quant::detail

#endif
