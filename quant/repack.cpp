#include "quant/repack.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "quant/error.h"

namespace k3::quant {
namespace {

using std::size_t;

// Bytes of the scale field at the start of a block (the rest is the quant payload).
size_t scale_bytes(Type type) { return type == Type::kMXFP4 ? 1 : 2; }

// Copies row `row` (of a full group) between the plain row `plain` and the repacked group at
// `group`: to_plain selects the direction.
void copy_group_row(Type type, size_t cols, size_t r_in_group, size_t interleave,
                    const std::uint8_t* src, std::uint8_t* dst, bool to_plain) {
  const TypeTraits& t = traits(type);
  const size_t bb = t.block_bytes, sb = scale_bytes(type), qb = bb - sb;
  const size_t blocks = cols / t.block_elems;
  for (size_t b = 0; b < blocks; ++b) {
    const size_t sup = b * interleave * bb;
    const size_t s_at = sup + r_in_group * sb, q_at = sup + interleave * sb + r_in_group * qb;
    if (to_plain) {
      std::memcpy(dst + b * bb, src + s_at, sb);
      std::memcpy(dst + b * bb + sb, src + q_at, qb);
    } else {
      std::memcpy(dst + s_at, src + b * bb, sb);
      std::memcpy(dst + q_at, src + b * bb + sb, qb);
    }
  }
}

// The same for the VNNI order (repack.h): row `r` of a 16-row group between its plain row and
// the group's super-blocks.
void copy_vnni_row(Type type, size_t cols, size_t r, const std::uint8_t* src, std::uint8_t* dst,
                   bool to_plain) {
  const size_t bb = traits(type).block_bytes, blocks = cols / 32;
  const size_t payload = kVnniRows * (bb - 2);  // the 16 scales follow the codes
  for (size_t b = 0; b < blocks; ++b) {
    const size_t sup = b * kVnniRows * bb;
    const std::uint8_t* s_sup = to_plain ? src + sup : nullptr;
    std::uint8_t* d_sup = to_plain ? nullptr : dst + sup;
    const std::uint8_t* s_blk = to_plain ? nullptr : src + b * bb;
    std::uint8_t* d_blk = to_plain ? dst + b * bb : nullptr;
    if (to_plain) {
      std::memcpy(d_blk, s_sup + payload + 2 * r, 2);
      if (type == Type::kQ4_0) std::memset(d_blk + 2, 0, 16);
    } else {
      std::memcpy(d_sup + payload + 2 * r, s_blk, 2);
    }
    for (size_t k = 0; k < 8; ++k) {    // 4-element group k of the block
      for (size_t j = 0; j < 4; ++j) {  // element e = 4k + j
        const size_t e = 4 * k + j;
        if (type == Type::kQ8_0) {
          const size_t at = 64 * k + 4 * r + j;
          if (to_plain) {
            d_blk[2 + e] = static_cast<std::uint8_t>(s_sup[at] ^ 0x80);
          } else {
            d_sup[at] = static_cast<std::uint8_t>(s_blk[2 + e] ^ 0x80);
          }
          continue;
        }
        // Q4_0: plain element e is nibble e / 16 of byte e % 16; VNNI element 8p + j is the
        // low nibble and 8p + 4 + j the high nibble of byte 4r + j of chunk p.
        const size_t at = 64 * (k / 2) + 4 * r + j;
        const int vshift = (k % 2) * 4, pshift = e < 16 ? 0 : 4;
        const size_t pbyte = 2 + e % 16;
        // Both directions OR the nibble into a zeroed byte (the repacked buffer starts zeroed,
        // the plain payload is cleared below).
        if (to_plain) {
          const auto code = static_cast<std::uint8_t>((s_sup[at] >> vshift) & 0x0f);
          d_blk[pbyte] = static_cast<std::uint8_t>(d_blk[pbyte] | code << pshift);
        } else {
          const auto code = static_cast<std::uint8_t>((s_blk[pbyte] >> pshift) & 0x0f);
          d_sup[at] = static_cast<std::uint8_t>(d_sup[at] | code << vshift);
        }
      }
    }
  }
}

// w (plain) repacked by r rows: every full group interleaved with `copy_row(k, row, group)`
// (row k of the group), the tail rows copied.
template <class CopyRow>
Repacked interleaved(const MatrixView& w, size_t r, bool vnni, CopyRow copy_row) {
  Repacked out;
  out.type = w.type;
  out.rows = w.rows;
  out.cols = w.cols;
  out.interleave = r;
  out.vnni = vnni;
  out.data.assign(w.data.size(), 0);
  if (w.rows == 0 || w.cols == 0) return out;
  const size_t rb = row_bytes(w.type, w.cols), groups = w.rows / r;
  const std::uint8_t* src = w.data.data();
  std::uint8_t* dst = out.data.data();
  tbb::parallel_for(tbb::blocked_range<size_t>(0, groups, 16), [&](const tbb::blocked_range<size_t>& g) {
    for (size_t i = g.begin(); i < g.end(); ++i) {
      for (size_t k = 0; k < r; ++k) copy_row(k, src + (i * r + k) * rb, dst + i * r * rb);
    }
  });
  std::memcpy(dst + groups * r * rb, src + groups * r * rb, (w.rows - groups * r) * rb);
  return out;
}

}  // namespace

bool can_repack_vnni(Type type) { return type == Type::kQ8_0 || type == Type::kQ4_0; }

bool can_repack(Type type) {
  return type == Type::kQ8_0 || type == Type::kQ4_0 || type == Type::kMXFP4;
}

MatrixView Repacked::view() const {
  MatrixView v;
  v.type = type;
  v.rows = rows;
  v.cols = cols;
  v.data = data;
  v.interleave = interleave;
  v.vnni = vnni;
  return v;
}

Repacked repack(const MatrixView& w, size_t rows_per_group) {
  validate(w);
  if (!can_repack(w.type) || w.interleave != 0 || rows_per_group < 2 || rows_per_group > 16) {
    throw InputError("quant: cannot repack " + describe(w) + " by " +
                     std::to_string(rows_per_group) + " rows" +
                     (w.interleave != 0 ? " (already repacked)" : ""));
  }
  const size_t r = rows_per_group;
  return interleaved(w, r, false, [&](size_t k, const std::uint8_t* row, std::uint8_t* group) {
    copy_group_row(w.type, w.cols, k, r, row, group, false);
  });
}

Repacked repack_vnni(const MatrixView& w) {
  validate(w);
  if (!can_repack_vnni(w.type) || w.interleave != 0) {
    throw InputError("quant: cannot repack " + describe(w) + " into the VNNI order" +
                     (w.interleave != 0 ? " (already repacked)" : " (Q8_0 and Q4_0 only)"));
  }
  return interleaved(w, kVnniRows, true, [&](size_t k, const std::uint8_t* row, std::uint8_t* group) {
    copy_vnni_row(w.type, w.cols, k, row, group, false);
  });
}

void unpack_rows(const MatrixView& w, size_t first, size_t count, std::uint8_t* dst) {
  if (count == 0) return;
  const size_t rb = w.rows == 0 ? 0 : w.data.size() / w.rows;
  if (first > w.rows || count > w.rows - first) {
    throw InternalError("quant: unpack_rows(" + describe(w) + ", " + std::to_string(first) + ", " +
                        std::to_string(count) + ")");
  }
  const size_t r = w.interleave;
  const size_t full = r == 0 ? 0 : w.rows / r * r;
  for (size_t row = first; row < first + count; ++row) {
    std::uint8_t* out = dst + (row - first) * rb;
    if (row >= full) {
      std::memcpy(out, w.data.data() + row * rb, rb);
    } else if (w.vnni) {
      copy_vnni_row(w.type, w.cols, row % r, w.data.data() + (row - row % r) * rb, out, true);
    } else {
      copy_group_row(w.type, w.cols, row % r, r, w.data.data() + (row - row % r) * rb, out, true);
    }
  }
}

std::vector<std::uint8_t> unpack(const MatrixView& w) {
  validate(w);
  std::vector<std::uint8_t> out(w.data.size());
  if (!out.empty()) unpack_rows(w, 0, w.rows, out.data());
  return out;
}

}  // namespace k3::quant
