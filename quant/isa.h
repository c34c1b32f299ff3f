// Which instruction set the kernels use. Chosen at run time from cpuid; can be lowered for
// testing with the environment variable K3_QUANT_ISA=scalar|avx2|avx512|amx or set_active_isa().
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace k3::quant {

enum class Isa : std::uint8_t {
  kScalar,  // portable C++
  kAvx2,    // AVX2 + FMA + F16C
  kAvx512,  // AVX-512 F/BW/VL/DQ/VNNI (+ AVX2, FMA, F16C)
  kAmx,     // kAvx512 + AMX-TILE/AMX-INT8, with the OS's permission for the tile data
};

std::string_view name(Isa isa);
std::optional<Isa> isa_from_name(std::string_view name);

// The best ISA this CPU and OS support.
Isa detected_isa();
// Every ISA usable here, from kScalar up to detected_isa().
std::vector<Isa> available_isas();
// What gemv/gemm use when no ISA is passed: detected_isa(), lowered by K3_QUANT_ISA (read
// once; an unknown or unsupported value throws UsageError on first use) or set_active_isa().
Isa active_isa();
// Throws UsageError if the CPU lacks `isa`.
void set_active_isa(Isa isa);

}  // namespace k3::quant
