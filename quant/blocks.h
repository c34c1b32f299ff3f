// The block layouts of the self-contained block types, as plain structs with checked sizes
// (ggml/src/ggml-common.h). They are the one statement of each layout: TypeTraits' block sizes
// and the field offsets the kernels use (layout::) derive from them. Code reads fields with
// memcpy through the offsets (fp.h load_u16), never through a cast pointer, so blocks at any
// alignment inside a checkpoint are fine.
#pragma once

#include <cstddef>
#include <cstdint>

namespace k3::quant {

inline constexpr std::size_t kBlock32 = 32;  // elements of a Q8_0 / Q4_0 / MXFP4 block
inline constexpr std::size_t kBlockK = 256;  // elements of a K-quant super-block

struct BlockQ8_0 {
  std::uint16_t d;           // fp16 scale
  std::int8_t qs[kBlock32];  // w = qs * d
};

struct BlockQ4_0 {
  std::uint16_t d;                // fp16 scale
  std::uint8_t qs[kBlock32 / 2];  // element j in the low nibble of qs[j], j + 16 in the high
};

struct BlockMXFP4 {
  std::uint8_t e;                 // E8M0 shared exponent
  std::uint8_t qs[kBlock32 / 2];  // E2M1 codes, nibbles as Q4_0
};

struct BlockQ2_K {
  std::uint8_t scales[kBlockK / 16];  // per 16 elements: scale (low nibble), min (high nibble)
  std::uint8_t qs[kBlockK / 4];       // 2-bit codes
  std::uint16_t d;                    // fp16 super-block scale of the scales
  std::uint16_t dmin;                 // fp16 super-block scale of the mins
};

struct BlockQ3_K {
  std::uint8_t hmask[kBlockK / 8];  // the high bit of each 3-bit code
  std::uint8_t qs[kBlockK / 4];     // the low 2 bits
  std::uint8_t scales[12];          // 16 6-bit scales, packed
  std::uint16_t d;                  // fp16 super-block scale
};

static_assert(sizeof(BlockQ8_0) == 34 && offsetof(BlockQ8_0, qs) == 2);
static_assert(sizeof(BlockQ4_0) == 18 && offsetof(BlockQ4_0, qs) == 2);
static_assert(sizeof(BlockMXFP4) == 17 && offsetof(BlockMXFP4, qs) == 1);
static_assert(sizeof(BlockQ2_K) == 84 && offsetof(BlockQ2_K, d) == 80);
static_assert(sizeof(BlockQ3_K) == 110 && offsetof(BlockQ3_K, d) == 108);

// Bytes of one block (the stride along a row) and the byte offsets of its fields.
namespace layout {
inline constexpr std::size_t kQ8_0Bytes = sizeof(BlockQ8_0), kQ4_0Bytes = sizeof(BlockQ4_0);
inline constexpr std::size_t kMxfp4Bytes = sizeof(BlockMXFP4);
inline constexpr std::size_t kQ2KBytes = sizeof(BlockQ2_K), kQ3KBytes = sizeof(BlockQ3_K);
inline constexpr std::size_t kQ8_0D = offsetof(BlockQ8_0, d), kQ8_0Qs = offsetof(BlockQ8_0, qs);
inline constexpr std::size_t kQ4_0D = offsetof(BlockQ4_0, d), kQ4_0Qs = offsetof(BlockQ4_0, qs);
inline constexpr std::size_t kMxfp4E = offsetof(BlockMXFP4, e);
inline constexpr std::size_t kMxfp4Qs = offsetof(BlockMXFP4, qs);
inline constexpr std::size_t kQ2KScales = offsetof(BlockQ2_K, scales);
inline constexpr std::size_t kQ2KQs = offsetof(BlockQ2_K, qs);
inline constexpr std::size_t kQ2KD = offsetof(BlockQ2_K, d);
inline constexpr std::size_t kQ2KDmin = offsetof(BlockQ2_K, dmin);
inline constexpr std::size_t kQ3KHmask = offsetof(BlockQ3_K, hmask);
inline constexpr std::size_t kQ3KQs = offsetof(BlockQ3_K, qs);
inline constexpr std::size_t kQ3KScales = offsetof(BlockQ3_K, scales);
inline constexpr std::size_t kQ3KD = offsetof(BlockQ3_K, d);

// The K-quant super-blocks of the VNNI order (quant/repack.h): 16 rows' blocks, field by field.
inline constexpr std::size_t kKVnniCodes = 0;  // 16 chunks of 64 bytes: the 2-bit codes
inline constexpr std::size_t kQ2KVnniScales = 1024, kQ2KVnniD = 1280, kQ2KVnniDmin = 1312;
inline constexpr std::size_t kQ3KVnniHigh = 1024, kQ3KVnniScales = 1536, kQ3KVnniD = 1728;
static_assert(kQ2KVnniDmin + 32 == 16 * kQ2KBytes && kQ3KVnniD + 32 == 16 * kQ3KBytes);
}  // namespace layout

}  // namespace k3::quant
