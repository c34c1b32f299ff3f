// Internal: what the AVX-512 (F, BW, VL, DQ, VNNI) kernel files share. As everywhere in quant/,
// the ISA is enabled per function with a target attribute (K3_512), never for a whole file.
//
// One file per block family, each defining its kernels in k3::quant::detail::avx512:
//   kernels_avx512_float.cpp     F32 / F16 / BF16 weights, fp32 activations
//   kernels_avx512_q8.cpp        Q8_0, Q4_0, MXFP4 (ggml and compressed-tensors), ModelSlim
//                                int8 and int4 against int8 activation blocks of 32
//   kernels_avx512_repacked.cpp  Q8_0, Q4_0, MXFP4 repacked by 4 rows (quant/repack.h)
//   kernels_avx512_kquant.cpp    Q2_K, Q3_K against Q8_K activations
//   kernels_avx512_vnni.cpp      Q8_0, Q4_0, Q2_K, Q3_K in the 16-row VNNI order
// and kernels_avx512.cpp, the activation quantizers and the table: the row kernels of
// kernel_rows.inc, declared below and instantiated in their family's file, and each file's
// tile kernels through its add_*_tiles.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/blocks.h"
#include "quant/kernel_table.h"
#include "quant/kernels_x86.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 headers pass _mm512_undefined_*() as the merge source of several intrinsics
// (permutexvar, cvtepi32_ps, inserti64x4, ...) and then warn about it once inlined (GCC PR
// 105593, fixed in GCC 13). The values are never read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#define K3_TARGET_512 "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"
#define K3_512 __attribute__((target(K3_TARGET_512)))
#define K3_512_INLINE __attribute__((target(K3_TARGET_512), always_inline)) inline
// A kernel body instantiated for many shapes and reached from one dispatcher: kept a function of
// its own, as GCC keeps it anyway. Clang otherwise inlines every instantiation into the
// dispatcher and spends four times as long optimising the result (kernels_avx512_vnni.cpp:
// 52.6 s at -O3 against 12.9, for the same per-shape code).
#define K3_512_NOINLINE __attribute__((target(K3_TARGET_512), noinline))

namespace k3::quant::detail::avx512 {

using std::size_t;
using std::uint8_t;

K3_512_INLINE __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
K3_512_INLINE __m128i load64(const void* p) {
  return _mm_loadl_epi64(static_cast<const __m128i*>(p));
}

// The row kernels named in kernel_rows.inc (the RowKernel arguments but the count).
#define K3_ROW_PARAMS const MatrixView&, size_t, const ActView&, size_t, float*, size_t

template <Type T, int NA>
K3_512 void row_float_n(K3_ROW_PARAMS);  // kernels_avx512_float.cpp

template <Type T>
struct PlainD;  // kernels_avx512_q8.cpp: the decoders of row_q8_n
using Q8_0D = PlainD<Type::kQ8_0>;
using Q4_0D = PlainD<Type::kQ4_0>;
using Mxfp4D = PlainD<Type::kMXFP4>;
struct Mxfp4PackedD;
template <class D, int NA>
K3_512 void row_q8_n(K3_ROW_PARAMS);  // kernels_avx512_q8.h
template <int NA>
K3_512 void row_ms_int8_n(K3_ROW_PARAMS);  // kernels_avx512_q8.cpp
template <int NA>
K3_512 void row_ms_int4_n(K3_ROW_PARAMS);

template <int NA>
K3_512 void row_q2_k_n(K3_ROW_PARAMS);  // kernels_avx512_kquant.cpp
template <int NA>
K3_512 void row_q3_k_n(K3_ROW_PARAMS);

// Instantiates a row kernel for every activation count rows_by_count asks for:
// K3_AVX512_ROWS(row_q8_n, Q8_0D) gives row_q8_n<Q8_0D, 1> .. row_q8_n<Q8_0D, 4>.
#define K3_AVX512_ROW(kernel, na, ...) \
  template void kernel<__VA_ARGS__ __VA_OPT__(, ) na>(K3_ROW_PARAMS)
#define K3_AVX512_ROWS(kernel, ...)      \
  K3_AVX512_ROW(kernel, 1, __VA_ARGS__); \
  K3_AVX512_ROW(kernel, 2, __VA_ARGS__); \
  K3_AVX512_ROW(kernel, 3, __VA_ARGS__); \
  K3_AVX512_ROW(kernel, 4, __VA_ARGS__)

// Each family's tile kernels into the table (KernelTable::tile, repacked, vnni).
void add_float_tiles(KernelTable& t);
void add_q8_tiles(KernelTable& t);
void add_repacked_tiles(KernelTable& t);
void add_k_quant_tiles(KernelTable& t);
void add_vnni_tiles(KernelTable& t);

}  // namespace k3::quant::detail::avx512

#endif
