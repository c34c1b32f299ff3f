#include "quant/repack.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "common/error.h"
#include "quant/blocks.h"

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

// Where a code sits: its byte and, for Q4_0, the nibble's shift (0 or 4).
struct CodeAt {
  size_t byte;
  int shift;
};

// Element e (0..31) of a plain Q8_0/Q4_0 block: after the 2 scale bytes; Q4_0 keeps elements
// 0-15 in the low nibbles and 16-31 in the high nibbles of the 16 payload bytes.
CodeAt plain_at(Type type, size_t e) {
  if (type == Type::kQ8_0) return {2 + e, 0};
  return {2 + e % 16, e < 16 ? 0 : 4};
}

// Element e of row r in a VNNI super-block (repack.h): 4-element group k = e / 4 is chunk k
// (Q8_0), or the low (k even) / high (k odd) nibbles of chunk k / 2 (Q4_0), at byte 4r + e % 4.
CodeAt vnni_at(Type type, size_t r, size_t e) {
  const size_t k = e / 4, j = e % 4;
  if (type == Type::kQ8_0) return {64 * k + 4 * r + j, 0};
  return {64 * (k / 2) + 4 * r + j, static_cast<int>(k % 2) * 4};
}

std::uint32_t load32(const std::uint8_t* p) {
  std::uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

void store32(std::uint8_t* p, std::uint32_t w) { std::memcpy(p, &w, sizeof w); }

bool is_k_quant(Type type) { return type == Type::kQ2_K || type == Type::kQ3_K; }

// ggml's K-quant codes: element e = 128 h + 32 s + l has its 2 low bits in qs[32 h + l] at bits
// 2 s. So sub-block t (elements 16t .. 16t+15) is the 16 bytes from kcode_at(t), at one shift.
size_t kcode_at(size_t t) { return 32 * (t / 8) + 16 * (t % 2); }
int kcode_shift(size_t t) { return 2 * static_cast<int>((t % 8) / 2); }

// Byte i of a scale word holds sub-block 4k + kPairOrder[i]: 16-bit word 0 then pairs
// sub-blocks 4k and 4k + 1, word 1 pairs 4k + 2 and 4k + 3 (repack.h).
constexpr std::array<std::size_t, 4> kPairOrder = {0, 2, 1, 3};

// The 16 6-bit Q3_K scale codes (value = code - 32) from ggml's 12 packed bytes: low nibbles
// p[j] & 15 (j < 8) and p[j - 8] >> 4 (j >= 8), the top two bits of j in p[8 + j % 4] at bit
// 2 (j / 4). And back.
void q3_k_scale_codes(const std::uint8_t* p, std::uint8_t* q) {
  for (size_t j = 0; j < 16; ++j) {
    const unsigned lo = j < 8 ? p[j] & 15u : p[j - 8] >> 4;
    const unsigned hi = (p[8 + j % 4] >> (2 * (j / 4))) & 3u;
    q[j] = static_cast<std::uint8_t>(lo | hi << 4);
  }
}

void q3_k_pack_scales(const std::uint8_t* q, std::uint8_t* p) {
  std::memset(p, 0, 12);
  for (size_t j = 0; j < 16; ++j) {
    if (j < 8) {
      p[j] = static_cast<std::uint8_t>(p[j] | (q[j] & 15u));
    } else {
      p[j - 8] = static_cast<std::uint8_t>(p[j - 8] | (q[j] & 15u) << 4);
    }
    p[8 + j % 4] = static_cast<std::uint8_t>(p[8 + j % 4] | (q[j] >> 4) << (2 * (j / 4)));
  }
}

// Row `r` of a plain Q2_K/Q3_K matrix into its 16-row group in the VNNI order (repack.h), a
// 32-bit word at a time where the layout allows.
void k_to_vnni_row(Type type, size_t cols, size_t r, const std::uint8_t* src, std::uint8_t* dst) {
  const bool q3 = type == Type::kQ3_K;
  const size_t bb = traits(type).block_bytes, blocks = cols / kBlockK;
  for (size_t b = 0; b < blocks; ++b) {
    const std::uint8_t* blk = src + b * bb;
    std::uint8_t* sup = dst + b * kVnniRows * bb;
    const std::uint8_t* qs = blk + (q3 ? layout::kQ3KQs : layout::kQ2KQs);
    for (size_t t = 0; t < 16; ++t) {
      std::uint32_t word = 0;
      for (int s = 0; s < 4; ++s)
        word |= ((load32(qs + kcode_at(t) + 4 * s) >> kcode_shift(t)) & 0x03030303u) << (2 * s);
      store32(sup + layout::kKVnniCodes + 64 * t + 4 * r, word);
    }
    if (!q3) {
      for (size_t k = 0; k < 4; ++k)
        for (size_t i = 0; i < 4; ++i)
          sup[layout::kQ2KVnniScales + 64 * k + 4 * r + i] =
              blk[layout::kQ2KScales + 4 * k + kPairOrder[i]];
      std::memcpy(sup + layout::kQ2KVnniD + 2 * r, blk + layout::kQ2KD, 2);
      std::memcpy(sup + layout::kQ2KVnniDmin + 2 * r, blk + layout::kQ2KDmin, 2);
      continue;
    }
    // High bits: quad q's 64-bit mask holds row r's elements 4q .. 4q+3 in its nibble r
    // (hmask[e % 32] >> (e / 32) in ggml); the other rows' nibbles are ORed in by their calls.
    const std::uint8_t* hm = blk + layout::kQ3KHmask;
    for (size_t q = 0; q < 64; ++q) {
      unsigned nibble = 0;
      for (size_t j = 0; j < 4; ++j) nibble |= ((hm[(4 * q + j) % 32] >> (q / 8)) & 1u) << j;
      std::uint8_t& at = sup[layout::kQ3KVnniHigh + 8 * q + r / 2];
      at = static_cast<std::uint8_t>(at | nibble << (4 * (r % 2)));
    }
    std::uint8_t q[16];
    q3_k_scale_codes(blk + layout::kQ3KScales, q);
    for (size_t i = 0; i < 4; ++i) {
      unsigned v[4];
      for (size_t k = 0; k < 4; ++k) v[k] = q[4 * k + kPairOrder[i]] ^ 32u;
      std::uint8_t* at = sup + layout::kQ3KVnniScales + 4 * r + i;
      at[0] = static_cast<std::uint8_t>((v[0] & 15) | (v[1] & 15) << 4);
      at[64] = static_cast<std::uint8_t>((v[2] & 15) | (v[3] & 15) << 4);
      at[128] = static_cast<std::uint8_t>(v[0] >> 4 | (v[1] >> 4) << 2 | (v[2] >> 4) << 4 |
                                          (v[3] >> 4) << 6);
    }
    std::memcpy(sup + layout::kQ3KVnniD + 2 * r, blk + layout::kQ3KD, 2);
  }
}

// The inverse of k_to_vnni_row: row `r` of a 16-row group back in ggml's layout.
void k_from_vnni_row(Type type, size_t cols, size_t r, const std::uint8_t* group,
                     std::uint8_t* plain) {
  const bool q3 = type == Type::kQ3_K;
  const size_t bb = traits(type).block_bytes, blocks = cols / kBlockK;
  for (size_t b = 0; b < blocks; ++b) {
    const std::uint8_t* sup = group + b * kVnniRows * bb;
    std::uint8_t* blk = plain + b * bb;
    std::memset(blk, 0, bb);
    std::uint8_t* qs = blk + (q3 ? layout::kQ3KQs : layout::kQ2KQs);
    for (size_t t = 0; t < 16; ++t) {
      const std::uint32_t word = load32(sup + layout::kKVnniCodes + 64 * t + 4 * r);
      for (int s = 0; s < 4; ++s) {
        std::uint8_t* at = qs + kcode_at(t) + 4 * s;
        store32(at, load32(at) | ((word >> (2 * s)) & 0x03030303u) << kcode_shift(t));
      }
    }
    if (!q3) {
      for (size_t k = 0; k < 4; ++k)
        for (size_t i = 0; i < 4; ++i)
          blk[layout::kQ2KScales + 4 * k + kPairOrder[i]] =
              sup[layout::kQ2KVnniScales + 64 * k + 4 * r + i];
      std::memcpy(blk + layout::kQ2KD, sup + layout::kQ2KVnniD + 2 * r, 2);
      std::memcpy(blk + layout::kQ2KDmin, sup + layout::kQ2KVnniDmin + 2 * r, 2);
      continue;
    }
    std::uint8_t* hm = blk + layout::kQ3KHmask;
    for (size_t q = 0; q < 64; ++q) {
      const unsigned nibble = sup[layout::kQ3KVnniHigh + 8 * q + r / 2] >> (4 * (r % 2));
      for (size_t j = 0; j < 4; ++j) {
        std::uint8_t& at = hm[(4 * q + j) % 32];
        at = static_cast<std::uint8_t>(at | ((nibble >> j) & 1u) << (q / 8));
      }
    }
    std::uint8_t q[16];
    for (size_t i = 0; i < 4; ++i) {
      const std::uint8_t* at = sup + layout::kQ3KVnniScales + 4 * r + i;
      const unsigned a = at[0], bq = at[64], c = at[128];
      const unsigned v[4] = {(a & 15) | (c & 3) << 4, a >> 4 | ((c >> 2) & 3) << 4,
                             (bq & 15) | ((c >> 4) & 3) << 4, bq >> 4 | ((c >> 6) & 3) << 4};
      for (size_t k = 0; k < 4; ++k)
        q[4 * k + kPairOrder[i]] = static_cast<std::uint8_t>(v[k] ^ 32u);
    }
    q3_k_pack_scales(q, blk + layout::kQ3KScales);
    std::memcpy(blk + layout::kQ3KD, sup + layout::kQ3KVnniD + 2 * r, 2);
  }
}

// Row `r` of a 16-row group in the VNNI order (repack.h) written back as its plain row: the
// payload is cleared, then each code is ORed into its byte (Q8_0 codes change sign bit back
// from the stored + 128). Used by unpack_rows; the opposite direction is to_vnni_row.
void from_vnni_row(Type type, size_t cols, size_t r, const std::uint8_t* group,
                   std::uint8_t* plain) {
  if (is_k_quant(type)) return k_from_vnni_row(type, cols, r, group, plain);
  const size_t bb = traits(type).block_bytes, blocks = cols / 32;
  const size_t scales = kVnniRows * (bb - 2);  // the 16 scales follow the codes
  const unsigned mask = type == Type::kQ8_0 ? 0xff : 0x0f;
  const unsigned flip = type == Type::kQ8_0 ? 0x80 : 0;
  for (size_t b = 0; b < blocks; ++b) {
    const std::uint8_t* sup = group + b * kVnniRows * bb;
    std::uint8_t* blk = plain + b * bb;
    std::memcpy(blk, sup + scales + 2 * r, 2);
    std::memset(blk + 2, 0, bb - 2);
    for (size_t e = 0; e < 32; ++e) {
      const CodeAt from = vnni_at(type, r, e), to = plain_at(type, e);
      const unsigned code = ((sup[from.byte] >> from.shift) & mask) ^ flip;
      blk[to.byte] = static_cast<std::uint8_t>(blk[to.byte] | code << to.shift);
    }
  }
}

// Row `r` of a plain matrix into its 16-row group in the VNNI order: each 4-code group is one
// 32-bit word (Q8_0: the four sign bits flipped at once; Q4_0: two nibble words merged). What
// a loader runs on every matrix it repacks (a per-code form made a 5 GiB load 12 s slower).
void to_vnni_row(Type type, size_t cols, size_t r, const std::uint8_t* src, std::uint8_t* dst) {
  if (is_k_quant(type)) return k_to_vnni_row(type, cols, r, src, dst);
  const size_t bb = traits(type).block_bytes, blocks = cols / 32;
  const size_t scales = kVnniRows * (bb - 2);
  for (size_t b = 0; b < blocks; ++b) {
    const std::uint8_t* blk = src + b * bb;
    std::uint8_t* sup = dst + b * kVnniRows * bb;
    std::memcpy(sup + scales + 2 * r, blk, 2);
    for (size_t k = 0; k < (type == Type::kQ8_0 ? 8 : 4); ++k) {
      std::uint32_t word;
      if (type == Type::kQ8_0) {  // chunk k: codes 4k .. 4k+3, stored + 128
        std::memcpy(&word, blk + 2 + 4 * k, 4);
        word ^= 0x80808080u;
      } else {  // chunk k: codes 8k + j (low nibble) and 8k + 4 + j (high), j = 0..3
        std::uint32_t lo = 0, hi = 0;  // elements e < 16 in low nibbles of byte 2 + e, else high
        std::memcpy(&lo, blk + 2 + (8 * k) % 16, 4);
        std::memcpy(&hi, blk + 2 + (8 * k + 4) % 16, 4);
        const int lo_shift = 8 * k < 16 ? 0 : 4, hi_shift = 8 * k + 4 < 16 ? 0 : 4;
        word = ((lo >> lo_shift) & 0x0f0f0f0fu) | (((hi >> hi_shift) & 0x0f0f0f0fu) << 4);
      }
      std::memcpy(sup + 64 * k + 4 * r, &word, 4);
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
  tbb::parallel_for(tbb::blocked_range<size_t>(0, groups, 16),
                    [&](const tbb::blocked_range<size_t>& g) {
                      for (size_t i = g.begin(); i < g.end(); ++i) {
                        for (size_t k = 0; k < r; ++k)
                          copy_row(k, src + (i * r + k) * rb, dst + i * r * rb);
                      }
                    });
  std::memcpy(dst + groups * r * rb, src + groups * r * rb, (w.rows - groups * r) * rb);
  return out;
}

}  // namespace

bool can_repack_vnni(Type type) {
  return type == Type::kQ8_0 || type == Type::kQ4_0 || is_k_quant(type);
}

bool can_repack(Type type) {
  return type == Type::kQ8_0 || type == Type::kQ4_0 || type == Type::kMXFP4;
}

MatrixView Repacked::view() const { return view_of(*this, type, rows, cols); }

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
    throw InputError(
        "quant: cannot repack " + describe(w) + " into the VNNI order" +
        (w.interleave != 0 ? " (already repacked)" : " (Q8_0, Q4_0, Q2_K and Q3_K only)"));
  }
  return interleaved(w, kVnniRows, true,
                     [&](size_t k, const std::uint8_t* row, std::uint8_t* group) {
                       to_vnni_row(w.type, w.cols, k, row, group);
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
      from_vnni_row(w.type, w.cols, row % r, w.data.data() + (row - row % r) * rb, out);
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
