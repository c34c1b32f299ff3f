#include "quant/isa.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <atomic>
#include <cstdlib>
#include <string>

#include "common/error.h"

namespace k3::quant {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// F16C straight from CPUID: clang 14's __builtin_cpu_supports does not know "f16c".
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}

// AMX-TILE and AMX-INT8 in CPUID, the tile state enabled in XCR0, and Linux's per-process
// permission for the 8 KiB of tile data (arch_prctl ARCH_REQ_XCOMP_PERM; without it the first
// tile instruction faults).
bool amx_usable() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  const bool tile = (d & (1u << 24)) != 0, int8 = (d & (1u << 25)) != 0;
  if (!tile || !int8 || __get_cpuid(1, &a, &b, &c, &d) == 0 || (c & bit_OSXSAVE) == 0) return false;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  constexpr unsigned kTileState = (1u << 17) | (1u << 18);  // XTILECFG, XTILEDATA
  if ((lo & kTileState) != kTileState) return false;
#if defined(__linux__) && defined(__x86_64__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}
#endif

Isa probe() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
  if (avx512) return amx_usable() ? Isa::kAmx : Isa::kAvx512;
  if (avx2) return Isa::kAvx2;
#endif
  return Isa::kScalar;
}

constexpr std::uint8_t kUnset = 0xff;
std::atomic<std::uint8_t> g_active{kUnset};

void check_supported(Isa isa, std::string_view origin) {
  if (static_cast<int>(isa) > static_cast<int>(detected_isa())) {
    throw UsageError("quant: " + std::string(origin) + " asks for " + std::string(name(isa)) +
                     " but this CPU supports at most " + std::string(name(detected_isa())));
  }
}

}  // namespace

std::string_view name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAmx:
      return "amx";
  }
  return "?";
}

std::optional<Isa> isa_from_name(std::string_view n) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
    if (name(isa) == n) return isa;
  }
  return std::nullopt;
}

Isa detected_isa() {
  static const Isa detected = probe();
  return detected;
}

std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  for (int i = 0; i <= static_cast<int>(detected_isa()); ++i) out.push_back(static_cast<Isa>(i));
  return out;
}

Isa active_isa() {
  std::uint8_t v = g_active.load(std::memory_order_relaxed);
  if (v != kUnset) return static_cast<Isa>(v);
  Isa isa = detected_isa();
  if (const char* env = std::getenv("K3_QUANT_ISA"); env != nullptr && *env != '\0') {
    const auto parsed = isa_from_name(env);
    if (!parsed) {
      throw UsageError(std::string("quant: K3_QUANT_ISA='") + env +
                       "' is not one of scalar, avx2, avx512, amx");
    }
    check_supported(*parsed, "K3_QUANT_ISA");
    isa = *parsed;
  }
  g_active.store(static_cast<std::uint8_t>(isa), std::memory_order_relaxed);
  return isa;
}

void set_active_isa(Isa isa) {
  check_supported(isa, "set_active_isa");
  g_active.store(static_cast<std::uint8_t>(isa), std::memory_order_relaxed);
}

}  // namespace k3::quant
