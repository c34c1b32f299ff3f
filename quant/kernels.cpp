#include "quant/kernels.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "quant/kernel_table.h"
#include "quant/repack.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define K3_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define K3_ASAN 1
#endif
#if defined(K3_ASAN)
#include <sanitizer/asan_interface.h>
#endif

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

#if defined(K3_ASAN)
// A sanitizer tree builds the GEMM kernels without ASan's per-load checks (quant/CMakeLists.txt);
// instead every byte a kernel is given is checked here, once per product, and a poisoned byte
// (past an allocation, freed, a stack redzone) is reported as ASan reports a bad load or store.
void check_addressable(const void* p, size_t bytes, bool is_write) {
  if (p == nullptr || bytes == 0) return;
  void* bad = __asan_region_is_poisoned(const_cast<void*>(p), bytes);
  if (bad == nullptr) return;
  __asan_report_error(__builtin_return_address(0), __builtin_frame_address(0),
                      __builtin_frame_address(0), bad, is_write ? 1 : 0, 1);
}
template <typename T>
void check_addressable(std::span<const T> s) {
  check_addressable(s.data(), s.size_bytes(), false);
}

void check_spans(const MatrixView& w, const ActView& a, std::span<float> y) {
  check_addressable(w.data);
  check_addressable(w.e8m0);
  check_addressable(w.scale);
  check_addressable(w.offset);
  check_addressable(w.group_scale);
  check_addressable(w.group_offset);
  // ActView's arrays, by the extents its comments give.
  const size_t rb = a.rows * a.blocks, g = a.groups16;
  check_addressable(a.f32, a.rows * a.cols * sizeof(float), false);
  check_addressable(a.qs, a.rows * a.cols, false);
  check_addressable(a.d, rb * sizeof(float), false);
  check_addressable(a.isum, rb * sizeof(std::int32_t), false);
  check_addressable(a.nisum, rb * sizeof(std::int32_t), false);
  check_addressable(a.xsum, rb * sizeof(float), false);
  check_addressable(a.row_xsum, a.rows * sizeof(float), false);
  check_addressable(a.bsums, rb * 16 * sizeof(std::int16_t), false);
  check_addressable(a.qs16, g * a.cols * 16, false);
  check_addressable(a.d16, g * a.blocks * 16 * sizeof(float), false);
  check_addressable(a.nisum16, g * a.blocks * 16 * sizeof(std::int32_t), false);
  check_addressable(a.bsums16, g * a.blocks * 256 * sizeof(std::int16_t), false);
  check_addressable(y.data(), y.size_bytes(), true);
}
#endif

void check_isa(Isa isa) {
  if (static_cast<int>(isa) > static_cast<int>(detected_isa())) {
    throw UsageError("quant: kernels for " + std::string(name(isa)) +
                     " requested, but this CPU supports at most " +
                     std::string(name(detected_isa())));
  }
}

// Every output of a plain view into y [a.rows, ldy] (columns 0 .. w.rows-1).
void run_plain(const MatrixView& w, const ActView& a, float* out, size_t ldy, Isa isa) {
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
  tbb::parallel_for(tbb::blocked_range<size_t>(0, units, grain),
                    [&](const tbb::blocked_range<size_t>& r) {
                      for (size_t u0 = r.begin(); u0 < r.end(); u0 += kTile) {
                        const size_t u1 = std::min(r.end(), u0 + kTile);
                        if (k.tile != nullptr) {
                          k.tile(w, u0, u1 - u0, a, out, ldy);
                          continue;
                        }
                        for (size_t a0 = 0; a0 < n; a0 += detail::kMaxActs) {
                          const size_t na = std::min(detail::kMaxActs, n - a0);
                          for (size_t u = u0; u < u1; ++u) k.row(w, u, a, a0, na, out, ldy);
                        }
                      }
                    });
}

// A repacked view: whole groups through the repacked tile kernel (tiles of kTileUnits rows,
// group-aligned), the plain tail rows through the plain kernels.
void run_repacked(const MatrixView& w, const ActView& a, float* out, Isa isa) {
  const size_t ri = w.interleave;
  const size_t groups = w.rows / ri, full = groups * ri;
  const auto i = static_cast<size_t>(w.type);
  TileKernel rk = nullptr;
  size_t tile_groups = std::max<size_t>(1, detail::kTileUnits / ri);
  if (w.vnni) {
    if (isa >= Isa::kAvx512) rk = detail::avx512_kernels().vnni[i];
    if (isa >= Isa::kAmx && detail::amx_kernels().vnni[i] != nullptr)
      rk = detail::amx_kernels().vnni[i];
    tile_groups = detail::kVnniTileGroups;
  } else if (ri == kRepackRows) {
    if (isa >= Isa::kAvx2 && detail::avx2_kernels().repacked[i] != nullptr)
      rk = detail::avx2_kernels().repacked[i];
    if (isa >= Isa::kAvx512 && detail::avx512_kernels().repacked[i] != nullptr)
      rk = detail::avx512_kernels().repacked[i];
  }
  const Selected k = select(w.type, isa);
  // The work is split into whole tiles: a batch-1 VNNI tile reads its 8 groups as 8 streams,
  // which is what its prefetch distances were tuned for. Split by groups, a third of the wide
  // preset's decode GEMV samples were in tiles of 3-6 groups (the decode time itself did not
  // change measurably when that went).
  const size_t tiles = (groups + tile_groups - 1) / tile_groups;
  const size_t tile_bytes = std::max<size_t>(1, w.data.size() / w.rows * ri * tile_groups);
  const size_t grain = std::max<size_t>(1, (32u << 10) / tile_bytes);
  auto run_tiles = [&](const tbb::blocked_range<size_t>& r) {
    for (size_t t = r.begin(); t < r.end(); ++t) {
      const size_t g0 = t * tile_groups;
      const size_t g1 = std::min(groups, g0 + tile_groups);
      if (rk != nullptr) {
        rk(w, g0 * ri, (g1 - g0) * ri, a, out, w.rows);
      } else {
        // No repacked kernel for this ISA: the plain kernels on an unpacked copy.
        detail::run_unpacked(w, g0 * ri, (g1 - g0) * ri, a, out, w.rows, k.row, k.tile);
      }
    }
  };
  // One chunk (a small expert's matrix) runs here: a task per call cost more than its product.
  if (tiles <= grain) {
    run_tiles(tbb::blocked_range<size_t>(0, tiles, grain));
  } else {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, tiles, grain), run_tiles);
  }
  if (full < w.rows) run_plain(row_slice(w, full, w.rows - full), a, out + full, w.rows, isa);
}

}  // namespace

void detail::run_unpacked(const MatrixView& w, size_t row0, size_t nrows, const ActView& a,
                          float* y, size_t ldy, RowKernel row, TileKernel tile) {
  thread_local std::vector<std::uint8_t> buf;
  buf.resize(nrows * (w.data.size() / w.rows));
  unpack_rows(w, row0, nrows, buf.data());
  MatrixView v;
  v.type = w.type;
  v.rows = nrows;
  v.cols = w.cols;
  v.data = buf;
  float* out = y + row0;
  if (tile != nullptr) {
    tile(v, 0, nrows, a, out, ldy);
    return;
  }
  for (size_t a0 = 0; a0 < a.rows; a0 += detail::kMaxActs) {
    const size_t na = std::min(detail::kMaxActs, a.rows - a0);
    for (size_t u = 0; u < nrows; ++u) row(v, u, a, a0, na, out, ldy);
  }
}

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
#if defined(K3_ASAN)
  check_spans(w, a, y);
#endif
  if (w.cols == 0) {
    std::fill(y.begin(), y.end(), 0.0f);
    return;
  }
  if (w.interleave != 0) {
    run_repacked(w, a, y.data(), isa);
  } else {
    run_plain(w, a, y.data(), w.rows, isa);
  }
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

bool has_vnni_kernel(Type type, Isa isa) {
  return isa >= Isa::kAvx512 && detail::avx512_kernels().vnni[static_cast<size_t>(type)] != nullptr;
}

float dot(const MatrixView& w, std::size_t row, std::span<const float> x, Isa isa) {
  validate(w);
  if (row >= w.rows) {
    throw InputError("quant: " + describe(w) + ": row " + std::to_string(row) + " out of range");
  }
  if (w.interleave != 0 && row < w.rows / w.interleave * w.interleave) {  // its whole group
    const MatrixView group = row_slice(w, row - row % w.interleave, w.interleave);
    std::vector<float> y(w.interleave);
    gemv(group, x, y, isa);
    return y[row % w.interleave];
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
