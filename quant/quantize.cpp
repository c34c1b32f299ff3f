#include "quant/quantize.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.h"
#include "quant/reference.h"

namespace k3::quant {
namespace {

using std::size_t;

// Round half to even (torch.round, what ModelSlim uses), clamped; NaN becomes 0.
int round_clamp(float v, int lo, int hi) {
  const float r = std::nearbyint(v);
  if (!(r == r)) return 0;
  return static_cast<int>(std::clamp(r, static_cast<float>(lo), static_cast<float>(hi)));
}

struct Range {
  float lo, hi;
};

Range range_of(const float* x, size_t n) {
  Range r{0.0f, 0.0f};
  for (size_t i = 0; i < n; ++i) {
    r.lo = std::min(r.lo, x[i]);
    r.hi = std::max(r.hi, x[i]);
  }
  return r;
}

// Symmetric (offset 0) or asymmetric integer grid [qmin, qmax] for values x[0..n).
// Returns {scale, offset} with w ~ (q - offset) * scale.
std::pair<float, float> fit_grid(const float* x, size_t n, int qmin, int qmax, bool asymmetric) {
  const Range r = range_of(x, n);
  if (!asymmetric) {
    const float amax = std::max(-r.lo, r.hi);
    return {amax / static_cast<float>(qmax), 0.0f};
  }
  const float scale = (r.hi - r.lo) / static_cast<float>(qmax - qmin);
  if (!(scale > 0.0f)) return {0.0f, 0.0f};
  const float offset = static_cast<float>(qmin) - std::nearbyint(r.lo / scale);
  return {scale, offset};
}

void quantize_ms_int8(QuantizedMatrix& m, std::span<const float> w, bool asymmetric) {
  const size_t cols = m.cols;
  m.scale.assign(m.rows, 0.0f);
  if (asymmetric) m.offset.assign(m.rows, 0.0f);
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, m.rows), [&](const tbb::blocked_range<size_t>& rr) {
        for (size_t r = rr.begin(); r != rr.end(); ++r) {
          const float* x = w.data() + r * cols;
          const int qmin = asymmetric ? -128 : -127;
          const auto [scale, offset] = fit_grid(x, cols, qmin, 127, asymmetric);
          const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
          m.scale[r] = scale;
          if (asymmetric) m.offset[r] = offset;
          for (size_t k = 0; k < cols; ++k) {
            const int q = round_clamp(x[k] * inv + offset, qmin, 127);
            m.data[r * cols + k] = static_cast<std::uint8_t>(static_cast<std::int8_t>(q));
          }
        }
      });
}

void quantize_ms_int4(QuantizedMatrix& m, std::span<const float> w, bool asymmetric) {
  const size_t cols = m.cols;
  const size_t gs = m.group_size;
  const size_t groups = gs == 0 ? 0 : cols / gs;
  m.scale.assign(m.rows, 0.0f);
  if (asymmetric && gs == 0) m.offset.assign(m.rows, 0.0f);
  if (gs != 0) {
    m.group_scale.assign(m.rows * groups, 0.0f);
    if (asymmetric) m.group_offset.assign(m.rows * groups, 0.0f);
  }
  const int qmin = asymmetric ? -8 : -7;
  // Rows 2j and 2j+1 share bytes, so the parallel loop runs over row pairs.
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, m.rows / 2), [&](const tbb::blocked_range<size_t>& rr) {
        std::vector<float> gscale(groups), goff(groups);
        for (size_t r = 2 * rr.begin(); r != 2 * rr.end(); ++r) {
          const float* x = w.data() + r * cols;
          std::uint8_t* packed = m.data.data() + (r / 2) * cols;
          const int shift = (r % 2) * 4;
          auto store = [&](size_t k, int q) {
            const auto code = static_cast<std::uint8_t>(q & 0x0f);
            packed[k] = static_cast<std::uint8_t>((packed[k] & ~(0x0f << shift)) | (code << shift));
          };
          if (gs == 0) {
            const auto [scale, offset] = fit_grid(x, cols, qmin, 7, asymmetric);
            const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
            m.scale[r] = scale;
            if (asymmetric) m.offset[r] = offset;
            for (size_t k = 0; k < cols; ++k) store(k, round_clamp(x[k] * inv + offset, qmin, 7));
            continue;
          }
          float top = 0.0f;
          for (size_t g = 0; g < groups; ++g) {
            std::tie(gscale[g], goff[g]) = fit_grid(x + g * gs, gs, qmin, 7, asymmetric);
            top = std::max(top, gscale[g]);
          }
          m.scale[r] = top;
          for (size_t g = 0; g < groups; ++g) {
            m.group_scale[r * groups + g] = top > 0.0f ? gscale[g] / top : 0.0f;
            if (asymmetric) m.group_offset[r * groups + g] = goff[g];
            // Round against the scale the dequantizer will actually use.
            const float eff = m.group_scale[r * groups + g] * top;
            const float inv = eff > 0.0f ? 1.0f / eff : 0.0f;
            for (size_t k = g * gs; k < (g + 1) * gs; ++k)
              store(k, round_clamp(x[k] * inv + goff[g], qmin, 7));
          }
        }
      });
}

}  // namespace

MatrixView QuantizedMatrix::view() const { return view_of(*this, type, rows, cols); }

QuantizedMatrix stack_rows(const MatrixView& top, const MatrixView& bottom) {
  const bool same_side_arrays = top.e8m0.empty() == bottom.e8m0.empty() &&
                                top.scale.empty() == bottom.scale.empty() &&
                                top.offset.empty() == bottom.offset.empty() &&
                                top.group_scale.empty() == bottom.group_scale.empty() &&
                                top.group_offset.empty() == bottom.group_offset.empty();
  if (top.type != bottom.type || top.cols != bottom.cols || top.group_size != bottom.group_size ||
      top.interleave != 0 || bottom.interleave != 0 || !same_side_arrays) {
    throw InputError("quant: cannot stack " + describe(bottom) + " under " + describe(top) +
                     " (one type, width and layout needed)");
  }
  QuantizedMatrix m;
  m.type = top.type;
  m.rows = top.rows + bottom.rows;
  m.cols = top.cols;
  m.group_size = top.group_size;
  auto join = [](auto& out, const auto& a, const auto& b) {
    out.assign(a.begin(), a.end());
    out.insert(out.end(), b.begin(), b.end());
  };
  join(m.data, top.data, bottom.data);
  join(m.e8m0, top.e8m0, bottom.e8m0);
  join(m.scale, top.scale, bottom.scale);
  join(m.offset, top.offset, bottom.offset);
  join(m.group_scale, top.group_scale, bottom.group_scale);
  join(m.group_offset, top.group_offset, bottom.group_offset);
  if (m.data.size() != data_bytes(m.type, m.rows, m.cols)) {
    throw InputError("quant: stacking " + describe(top) + " and " + describe(bottom) + " gave " +
                     std::to_string(m.data.size()) + " bytes, not the " +
                     std::to_string(data_bytes(m.type, m.rows, m.cols)) + " of its shape");
  }
  return m;
}

QuantizedMatrix quantize(Type type, std::span<const float> w, std::size_t rows, std::size_t cols,
                         const QuantizeOptions& options) {
  QuantizedMatrix m;
  m.type = type;
  m.rows = rows;
  m.cols = cols;
  if (w.size() != rows * cols) {
    throw InputError("quant: quantize " + describe(type, rows, cols) + " from " +
                     std::to_string(w.size()) + " floats");
  }
  m.data.assign(data_bytes(type, rows, cols), 0);
  switch (type) {
    case Type::kModelSlimInt8:
      if (options.group_size != 0) {
        throw InputError("quant: MS_INT8 is per-channel; group_size must be 0");
      }
      quantize_ms_int8(m, w, options.asymmetric);
      break;
    case Type::kModelSlimInt4:
      m.group_size = options.group_size;
      if (m.group_size != 0 && (m.group_size % 32 != 0 || cols % m.group_size != 0)) {
        throw InputError("quant: " + describe(type, rows, cols) + ": group_size " +
                         std::to_string(m.group_size) +
                         " must be a multiple of 32 that divides the row length");
      }
      quantize_ms_int4(m, w, options.asymmetric);
      break;
    case Type::kMXFP4Packed:
      m.e8m0.assign(rows * (cols / 32), 0);
      tbb::parallel_for(
          tbb::blocked_range<size_t>(0, rows), [&](const tbb::blocked_range<size_t>& rr) {
            for (size_t r = rr.begin(); r != rr.end(); ++r) {
              quantize_row_mxfp4_packed(w.data() + r * cols, m.data.data() + r * (cols / 2),
                                        m.e8m0.data() + r * (cols / 32), cols);
            }
          });
      break;
    default: {
      const size_t rb = rows == 0 ? 0 : m.data.size() / rows;
      tbb::parallel_for(tbb::blocked_range<size_t>(0, rows),
                        [&](const tbb::blocked_range<size_t>& rr) {
                          for (size_t r = rr.begin(); r != rr.end(); ++r) {
                            quantize_row(type, w.data() + r * cols, m.data.data() + r * rb, cols);
                          }
                        });
      break;
    }
  }
  return m;
}

}  // namespace k3::quant
