// bench_quant: GEMV (batch 1) and GEMM (batch 4, 8, 16, 64; 2 and 3 in the VNNI order) for every
// weight format, in weight bytes per second, next to a plain read bandwidth measured on the very
// same buffers (pct_of_read), and next to the same read with the kernels' software prefetch
// (pct_of_read_pf).
//
// Weights stream from memory as in real decoding: each benchmark rotates over enough copies of
// the matrix to fill K3_BENCH_WORKING_SET_MB (default 1024 MiB; 0 = one copy, which may then be
// cache resident). Single thread unless K3_BENCH_THREADS says otherwise. The ISA is the
// detected one unless K3_QUANT_ISA lowers it. "_R4" formats are the same weights repacked
// row-interleaved by quant::repack (4 rows), "_V16" the same in the 16-row VNNI order
// (quant::repack_vnni), read through the same rotation.
//
// Memory: the copies are ordinary heap vectors on 4 KiB pages, as the engine's loader keeps its
// weights (model/load/bytes.h) and as ggml's CPU and AMX buffer types allocate (posix_memalign, no
// madvise). GLIBC_TUNABLES=glibc.malloc.hugetlb=1 puts them on transparent huge pages instead
// (needs THP "madvise" or "always"; check AnonHugePages in /proc/meminfo), for either binary.
// With --benchmark_repetitions=N the "_min" row has the best repetition's time (what a peer
// harness reporting its best of N runs compares with); its counters are per-counter minima.
//
// gemm_f32/...: quant::gemm_f32_nn on the MLA weighted-sum shape (64 tokens x 16 heads = 1024
// probability rows, 2048 cached positions, the 256-float latent of cache rows of 272 floats),
// in GFLOP/s of useful work (2 n sum_i k_i), next to the engine's naive loop compiled with the
// project's flags (`naive`). Depths: `full` (every row sees all 2048 positions), `causal` (the
// 64 tokens are the last of the 2048: token t sees 1985 + t) and `triangular` (row i sees
// (i + 1) * 2048 / 1024, half the work). `causal_per_head` is the causal product as 16 calls of
// 64 rows, one per head, with A rows interleaved by head (lda = 16 * 2048) as the engine stores
// its scores.
#include <benchmark/benchmark.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "quant/gemm_f32.h"
#include "quant/isa.h"
#include "quant/kernels.h"
#include "quant/quantize.h"
#include "quant/repack.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

using k3::quant::QuantizedMatrix;
using k3::quant::QuantizeOptions;
using k3::quant::Type;

std::size_t env_size(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? static_cast<std::size_t>(std::strtoull(v, nullptr, 10))
                                    : fallback;
}

struct Format {
  Type type;
  QuantizeOptions opt;
  std::string label;
  std::size_t interleave = 0;  // > 0: weights repacked by this many rows (quant/repack.h)
  bool vnni = false;           // repacked into the VNNI order instead (quant::repack_vnni)
};

struct Shape {
  std::size_t rows, cols;
};

// Copies of one weight matrix, rotated through so each call reads cold memory.
struct Working {
  std::vector<QuantizedMatrix> copies;
  std::size_t interleave = 0;
  bool vnni = false;
  std::size_t bytes_per_copy = 0;
  std::size_t total_bytes() const { return copies.size() * bytes_per_copy; }
};

std::size_t weight_bytes(const QuantizedMatrix& m) {
  return m.data.size() + m.e8m0.size() +
         sizeof(float) *
             (m.scale.size() + m.offset.size() + m.group_scale.size() + m.group_offset.size());
}

template <class T>
std::vector<T> tile(const std::vector<T>& v, std::size_t times) {
  std::vector<T> out;
  out.reserve(v.size() * times);
  for (std::size_t i = 0; i < times; ++i) out.insert(out.end(), v.begin(), v.end());
  return out;
}

// Quantizes 64 distinct random rows and tiles them: the values do not change the speed and
// quantizing 25M weights per format would dominate the run.
QuantizedMatrix make_matrix(const Format& f, const Shape& s) {
  constexpr std::size_t kUnique = 64;
  std::mt19937_64 rng(42);
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::vector<float> w(kUnique * s.cols);
  for (auto& x : w) x = g(rng);
  const QuantizedMatrix small = k3::quant::quantize(f.type, w, kUnique, s.cols, f.opt);
  const std::size_t times = s.rows / kUnique;
  QuantizedMatrix m = small;
  m.rows = s.rows;
  m.data = tile(small.data, times);
  m.e8m0 = tile(small.e8m0, times);
  m.scale = tile(small.scale, times);
  m.offset = tile(small.offset, times);
  m.group_scale = tile(small.group_scale, times);
  m.group_offset = tile(small.group_offset, times);
  if (f.vnni) {
    m.data = k3::quant::repack_vnni(m.view()).data;
  } else if (f.interleave != 0) {
    m.data = k3::quant::repack(m.view(), f.interleave).data;
  }
  return m;
}

// One format/shape at a time stays in memory (about the working-set size).
Working& working_set(const Format& f, const Shape& s) {
  static std::string key;
  static Working current;
  const std::string want = f.label + "/" + std::to_string(s.rows) + "x" + std::to_string(s.cols);
  if (key != want) {
    current = Working{};
    const QuantizedMatrix m = make_matrix(f, s);
    current.bytes_per_copy = weight_bytes(m);
    current.interleave = f.interleave;
    current.vnni = f.vnni;
    const std::size_t min_bytes = env_size("K3_BENCH_WORKING_SET_MB", 1024) << 20;
    const std::size_t n =
        std::max<std::size_t>(1, (min_bytes + current.bytes_per_copy - 1) / current.bytes_per_copy);
    current.copies.assign(n, m);
    key = want;
  }
  return current;
}

#if defined(__x86_64__)
// kPrefetch: the same read with the software prefetch the kernels use (4 KiB ahead into L2), an
// upper reference, since the hardware prefetchers alone do not reach it on this host.
template <bool kPrefetch>
__attribute__((target("avx2"))) std::uint64_t read_all_avx2(const std::uint8_t* p, std::size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  std::size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    if constexpr (kPrefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(p + i) + 4096, _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(p + i) + 4096 + 64, _MM_HINT_T1);
    }
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  std::uint64_t out[4];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), s);
  std::uint64_t r = out[0] + out[1] + out[2] + out[3];
  for (; i < n; ++i) r += p[i];
  return r;
}
#endif

// Reads every byte of a buffer once: the plain read bandwidth these kernels compete with.
std::uint64_t read_all(const std::uint8_t* p, std::size_t n, bool prefetch = false) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2"))
    return prefetch ? read_all_avx2<true>(p, n) : read_all_avx2<false>(p, n);
#endif
  (void)prefetch;
  std::uint64_t r = 0;
  for (std::size_t i = 0; i < n; ++i) r += p[i];
  return r;
}

double thread_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Best of three passes over all copies (their weight data, as the kernels read it). Thread CPU
// time, like Google Benchmark's rate counters, so both figures mean the same on a busy host.
double read_bandwidth(const Working& ws, bool prefetch = false) {
  double best = 0.0;
  for (int pass = 0; pass < 3; ++pass) {
    const double t0 = thread_seconds();
    std::uint64_t sink = 0;
    std::size_t bytes = 0;
    for (const auto& m : ws.copies) {
      sink += read_all(m.data.data(), m.data.size(), prefetch);
      bytes += m.data.size();
    }
    benchmark::DoNotOptimize(sink);
    best = std::max(best, static_cast<double>(bytes) / (thread_seconds() - t0));
  }
  return best;
}

void bench_matmul(benchmark::State& state, Format f, Shape s, std::size_t batch) {
  Working& ws = working_set(f, s);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(batch * s.cols), y(batch * s.rows);
  for (auto& v : x) v = g(rng);
  const double read_bw = read_bandwidth(ws);
  const double read_pf_bw = read_bandwidth(ws, true);
  std::size_t i = 0;
  const double t0 = thread_seconds();
  for (auto _ : state) {
    const QuantizedMatrix& m = ws.copies[i++ % ws.copies.size()];
    k3::quant::MatrixView v = m.view();
    v.interleave = ws.interleave;
    v.vnni = ws.vnni;
    k3::quant::gemm(v, x, batch, y);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double elapsed = thread_seconds() - t0;
  const double bytes =
      static_cast<double>(ws.bytes_per_copy) * static_cast<double>(state.iterations());
  state.counters["weight_B/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsRate);
  state.counters["read_B/s"] = read_bw;
  state.counters["pct_of_read"] = 100.0 * bytes / elapsed / read_bw;
  state.counters["read_pf_B/s"] = read_pf_bw;
  state.counters["pct_of_read_pf"] = 100.0 * bytes / elapsed / read_pf_bw;
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(batch * state.iterations()),
                                               benchmark::Counter::kIsRate);
  state.counters["copies"] = static_cast<double>(ws.copies.size());
  state.SetLabel(std::string(k3::quant::name(k3::quant::active_isa())));
}

// The same-size plain read on its own row, for reference.
void bench_read(benchmark::State& state, Format f, Shape s) {
  Working& ws = working_set(f, s);
  std::size_t bytes = 0;
  for (auto _ : state) {
    std::uint64_t sink = 0;
    for (const auto& m : ws.copies) sink += read_all(m.data.data(), m.data.size());
    benchmark::DoNotOptimize(sink);
  }
  for (const auto& m : ws.copies) bytes += m.data.size();
  state.counters["read_B/s"] =
      benchmark::Counter(static_cast<double>(bytes) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

// ------------------------------------------------------------------ gemm_f32_nn (MLA)

enum class Depth { kFull, kCausal, kTriangular };

struct MlaShape {
  std::size_t tokens = 64, heads = 16, k = 2048, n = 256, ldb = 272;
  std::size_t m() const { return tokens * heads; }
};

std::vector<std::size_t> depths(const MlaShape& s, Depth d) {
  std::vector<std::size_t> kr(s.m(), s.k);
  for (std::size_t i = 0; i < s.m(); ++i) {
    if (d == Depth::kCausal) kr[i] = s.k - s.tokens + i / s.heads + 1;  // rows (token, head)
    if (d == Depth::kTriangular) kr[i] = (i + 1) * s.k / s.m();
  }
  return kr;
}

// The loop in model/engine/engine.cpp (Engine::Impl::mla), as it compiles there.
void naive_weighted_sum(std::size_t m, std::size_t n, const std::size_t* kr, const float* a,
                        std::size_t lda, const float* b, std::size_t ldb, float* c,
                        std::size_t ldc) {
  for (std::size_t r = 0; r < m; ++r) {
    float* ol = c + r * ldc;
    for (std::size_t p = 0; p < kr[r]; ++p) {
      const float alpha = a[r * lda + p];
      const float* row = b + p * ldb;
      for (std::size_t d = 0; d < n; ++d) ol[d] += alpha * row[d];
    }
  }
}

void bench_gemm_f32(benchmark::State& state, Depth depth, bool per_head, bool naive) {
  const MlaShape s;
  const std::size_t m = s.m(), lda = s.k, ldc = s.n;
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> prob(0.0f, 2.0f / static_cast<float>(s.k));
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> a(m * lda), b(s.k * s.ldb), c(m * ldc, 0.0f);
  for (auto& x : a) x = prob(rng);
  for (auto& x : b) x = g(rng);
  const std::vector<std::size_t> kr = depths(s, depth);
  double fma_count = 0;
  for (std::size_t x : kr) fma_count += static_cast<double>(x * s.n);
  for (auto _ : state) {
    if (naive) {
      naive_weighted_sum(m, s.n, kr.data(), a.data(), lda, b.data(), s.ldb, c.data(), ldc);
    } else if (per_head) {  // row (token t, head h) of A is row t * heads + h
      std::vector<std::size_t> kh(s.tokens);
      for (std::size_t h = 0; h < s.heads; ++h) {
        for (std::size_t t = 0; t < s.tokens; ++t) kh[t] = kr[t * s.heads + h];
        k3::quant::gemm_f32_nn(s.tokens, s.n, s.k, a.data() + h * lda, s.heads * lda, b.data(),
                               s.ldb, c.data() + h * s.tokens * ldc, ldc, kh);
      }
    } else {
      k3::quant::gemm_f32_nn(m, s.n, s.k, a.data(), lda, b.data(), s.ldb, c.data(), ldc,
                             depth == Depth::kFull ? std::span<const std::size_t>() : kr);
    }
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP"] = benchmark::Counter(
      2e-9 * fma_count * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(naive ? "naive" : std::string(k3::quant::name(k3::quant::active_isa())));
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t threads = env_size("K3_BENCH_THREADS", 1);
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);

  const std::vector<Format> formats = {
      {Type::kF32, {}, "F32"},
      {Type::kF16, {}, "F16"},
      {Type::kBF16, {}, "BF16"},
      {Type::kQ8_0, {}, "Q8_0"},
      {Type::kQ8_0, {}, "Q8_0_R4", k3::quant::kRepackRows},
      {Type::kQ8_0, {}, "Q8_0_V16", k3::quant::kVnniRows, true},
      {Type::kQ4_0, {}, "Q4_0"},
      {Type::kQ4_0, {}, "Q4_0_R4", k3::quant::kRepackRows},
      {Type::kQ4_0, {}, "Q4_0_V16", k3::quant::kVnniRows, true},
      {Type::kQ2_K, {}, "Q2_K"},
      {Type::kQ2_K, {}, "Q2_K_V16", k3::quant::kVnniRows, true},
      {Type::kQ3_K, {}, "Q3_K"},
      {Type::kQ3_K, {}, "Q3_K_V16", k3::quant::kVnniRows, true},
      {Type::kMXFP4, {}, "MXFP4"},
      {Type::kMXFP4, {}, "MXFP4_R4", k3::quant::kRepackRows},
      {Type::kMXFP4Packed, {}, "CT_MXFP4"},
      {Type::kModelSlimInt8, {}, "MS_INT8"},
      {Type::kModelSlimInt4, {}, "MS_INT4"},
      {Type::kModelSlimInt4, {.group_size = 256}, "MS_INT4_g256"},
  };
  // 512x2048, 2048x512 and 256x256: the deep synthetic pair's (hidden 2048) projections and
  // routed experts, where per-call costs show.
  const std::vector<Shape> shapes = {
      {7168, 3584}, {4096, 4096}, {512, 2048}, {2048, 512}, {256, 256}};
  for (const Shape& s : shapes) {
    for (const Format& f : formats) {
      const std::string base =
          f.label + "/" + std::to_string(s.rows) + "x" + std::to_string(s.cols);
      benchmark::RegisterBenchmark(("read/" + base).c_str(), bench_read, f, s)
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.3);
      for (std::size_t batch : {1, 2, 3, 4, 8, 16, 64}) {
        // 2 and 3 rows (a verify step of 1-2 drafts) for the engine's VNNI-order layouts.
        if ((batch == 2 || batch == 3) && !f.vnni) continue;
        benchmark::RegisterBenchmark(("gemm/" + base + "/batch:" + std::to_string(batch)).c_str(),
                                     bench_matmul, f, s, batch)
            ->Unit(benchmark::kMillisecond)
            ->MinTime(0.5)
            ->ComputeStatistics("min", [](const std::vector<double>& v) {
              return *std::min_element(v.begin(), v.end());
            });
      }
    }
  }
  struct GemmCase {
    Depth depth;
    bool per_head;
    const char* label;
  };
  for (const GemmCase& g :
       {GemmCase{Depth::kFull, false, "full"}, GemmCase{Depth::kCausal, false, "causal"},
        GemmCase{Depth::kCausal, true, "causal_per_head"},
        GemmCase{Depth::kTriangular, false, "triangular"}}) {
    for (bool naive : {false, true}) {
      if (naive && g.per_head) continue;  // the same loop as `causal`
      const std::string bname = std::string("gemm_f32/mla_1024x256x2048_ldb272/") + g.label +
                                (naive ? "/naive" : "/gemm_f32_nn");
      auto* b =
          benchmark::RegisterBenchmark(bname.c_str(), bench_gemm_f32, g.depth, g.per_head, naive)
              ->Unit(benchmark::kMillisecond)
              ->MinTime(0.5);
      // CPU time of this thread (as the other rows) unless oneTBB may use more threads.
      if (threads > 1) b->UseRealTime();
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
