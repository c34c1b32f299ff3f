// Plain fp32 GEMM, "NN" (both operands row-major, neither transposed), with an optional
// per-row depth: what MLA attention needs for its weighted sum over the latent cache,
//   O [m, n] += P [m, k] * Cache [k, n],
// where row i of P (a query token x head) sees only the first k_i cached positions (causal).
//
// Bitwise determinism. Every output element is one sequential chain of fused multiply-adds
// starting from its current value:
//   acc = c[i, j];  for p = 0 .. k_i - 1:  acc = fma(a[i, p], b[p, j], acc);  c[i, j] = acc;
// whatever the ISA (scalar std::fma, AVX2 or AVX-512 lanes round identically), the shape, the
// register tile or remainder path the element falls in, its row's neighbours and their k, and
// the oneTBB thread count. Consequences: splitting k into consecutive calls gives the same
// bits as one call, and a row's result never depends on the batch it is computed in.
#pragma once

#include <cstddef>
#include <span>

#include "quant/isa.h"

namespace k3::quant {

// c[i, j] = fma chain above, for i < m, j < n, with k_i = k_per_row[i] if k_per_row is given
// (it then has m entries, each <= k) and k_i = k otherwise. Rows with k_i = 0 are untouched.
// Row-major with leading dimensions (in floats): a[i, p] = a[i * lda + p], b[p, j] =
// b[p * ldb + j], c[i, j] = c[i * ldc + j]; requires lda >= k, ldb >= n, ldc >= n.
//
// Reads only a[i, p] for p < k_i, and only b[p, j] for p < max_i k_i and j < n: B rows past the
// longest row (a cache not yet written) and columns past n (the rope part of a cache row) are
// never touched. c must not overlap a or b. Work is split over blocks of rows with oneTBB in
// the caller's task arena; no threads are created here.
//
// Throws InputError if k_per_row has the wrong size or an entry > k, or a leading dimension is
// too small; UsageError if `isa` is not supported by this CPU.
void gemm_f32_nn(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda,
                 const float* b, std::size_t ldb, float* c, std::size_t ldc,
                 std::span<const std::size_t> k_per_row = {});
void gemm_f32_nn(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda,
                 const float* b, std::size_t ldb, float* c, std::size_t ldc,
                 std::span<const std::size_t> k_per_row, Isa isa);

}  // namespace k3::quant
