// Scalar number formats shared by the reference code and the kernels: IEEE half, bfloat16,
// E8M0 and the E2M1 (FP4) table. Every function is defined for every bit pattern.
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace k3::quant {

// Exact for every pattern, including subnormals, infinities and NaN (payload kept).
inline float fp16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    const float f = static_cast<float>(man) * 0x1p-24f;  // zero or subnormal
    return sign ? -f : f;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
}

// Round to nearest even, like F16C's vcvtps2ph with imm 0 (what ggml uses on x86).
inline std::uint16_t f32_to_fp16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {  // NaN: keep it quiet, keep the top payload bits
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  if (ax >= 0x47800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 2^16, inf
  if (ax < 0x38800000u) {  // below 2^-14: half subnormal (or zero); scaling by 2^24 is exact
    const float scaled = std::bit_cast<float>(ax) * 0x1p24f;
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(scaled)));
  }
  std::uint32_t h = (((ax >> 23) - 112u) << 10) | ((ax >> 13) & 0x3ffu);
  const std::uint32_t rest = ax & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry into inf is correct
  return static_cast<std::uint16_t>(sign | h);
}

inline float bf16_to_f32(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

// Round to nearest even; NaN stays a quiet NaN.
inline std::uint16_t f32_to_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Half of the E8M0 scale, 2^(e-128): the factor that goes with the doubled E2M1 table below,
// exactly as ggml's GGML_E8M0_TO_FP32_HALF (e = 0, 1 give the subnormals 2^-128, 2^-127;
// e = 255 gives 2^127, ggml does not treat it as NaN).
inline float e8m0_half(std::uint8_t e) {
  const std::uint32_t bits =
      e < 2 ? (0x00200000u << e) : (static_cast<std::uint32_t>(e) - 1u) << 23;
  return std::bit_cast<float>(bits);
}

// E2M1 values times two, indexed by the 4-bit code (bit 3 = sign): ggml's kvalues_mxfp4.
inline constexpr std::array<std::int8_t, 16> kMxfp4Doubled = {0, 1,  2,  3,  4,  6,  8,  12,
                                                              0, -1, -2, -3, -4, -6, -8, -12};

// ggml's nearest_int: round to nearest even through the 1.5*2^23 trick. Exact for
// |v| <= 2^22; defined (but meaningless) for any other input, NaN included.
inline int nearest_int(float v) {
  const float shifted = v + 12582912.f;
  const auto bits = std::bit_cast<std::int32_t>(shifted);
  return (bits & 0x007fffff) - 0x00400000;
}

// Little-endian loads from byte pointers with any alignment.
inline std::uint16_t load_u16(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store_u16(std::uint8_t* p, std::uint16_t v) { std::memcpy(p, &v, sizeof v); }

}  // namespace k3::quant
