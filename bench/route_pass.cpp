// The Gram part of route() against the CPU's float32 FMA peak (bench/test_bench_route_pass.py compiles and runs
// this): one thread, for each N the float32 pass of large teams (simd/cosine_kernels.inl) and the float64 gram it
// replaces on the same rows, least CPU time per call over many calls; then the peak, from 12 independent chains
// of fused multiply-adds on full registers of the widest level this CPU runs (AVX-512, else AVX2).
//
// Usage: route_pass D CALLS N1 [N2 ...]. Prints one line per N ("pass N D seconds_pass seconds_gram
// max_abs_diff") and a last line "peak GFLOPS lanes". max_abs_diff: the pass's scores against the gram's cosines.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "simd/gram.hpp"

namespace {

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// 12 independent chains of `iters` fused multiply-adds on full registers; best GFLOP/s over 5 rounds. One body,
// compiled per level through the macro (a lambda would not inherit its caller's target).
#define TOPOROUTE_PEAK_BODY(V, FMA, SET, LANES)                                                  \
  const long iters = 20000000;                                                                 \
  double best = 0.0;                                                                           \
  for (int round = 0; round < 5; ++round) {                                                    \
    V acc[12];                                                                                 \
    for (int c = 0; c < 12; ++c) acc[c] = SET(1.0f + 1e-3f * static_cast<float>(c));           \
    const V m = SET(0.999999f), add = SET(1e-7f);                                              \
    const double t0 = cpu_seconds();                                                           \
    for (long it = 0; it < iters; ++it) {                                                      \
      for (int c = 0; c < 12; ++c) acc[c] = FMA(acc[c], m, add);                               \
    }                                                                                          \
    const double dt = cpu_seconds() - t0;                                                      \
    alignas(64) float out[16];                                                                 \
    float sink = 0.0f;                                                                         \
    for (int c = 0; c < 12; ++c) {                                                             \
      std::memcpy(out, &acc[c], sizeof(V));                                                    \
      sink += out[0];                                                                          \
    }                                                                                          \
    if (sink == 42.0f) std::puts(""); /* keeps the chains alive */                             \
    best = std::max(best, 2.0 * (LANES) * 12.0 * static_cast<double>(iters) / dt);             \
  }                                                                                            \
  return best;

__attribute__((target("avx512f"))) double peak_avx512() {
  TOPOROUTE_PEAK_BODY(__m512, _mm512_fmadd_ps, _mm512_set1_ps, 16)
}

__attribute__((target("avx2,fma"))) double peak_avx2() {
  TOPOROUTE_PEAK_BODY(__m256, _mm256_fmadd_ps, _mm256_set1_ps, 8)
}

}  // namespace

int main(int argc, char** argv) {
  using namespace toporoute;
  if (argc < 4) return 2;
  const bool wide = __builtin_cpu_supports("avx512f");
  if (!wide && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    std::puts("no AVX2/FMA: the float32 pass does not run on this CPU");
    return 3;
  }
  const simd::RouteKernels& rk = simd::route_kernels_for(wide ? Isa::avx512 : Isa::avx2);
  const long D = std::atol(argv[1]), calls = std::atol(argv[2]);
  std::mt19937 rng(1);
  std::normal_distribution<float> g;
  for (int a = 3; a < argc; ++a) {
    const long N = std::atol(argv[a]);
    const auto n = static_cast<std::size_t>(N);
    std::vector<float> k(n * D), q(n * D), scores(n * n);
    for (float& x : k) x = g(rng);
    for (float& x : q) x = g(rng);
    std::vector<double> ks(n), qs(n), value(n * n), dots(n * n), kss(n), qss(n);
    std::vector<std::int32_t> cand(n * n);
    std::vector<std::int64_t> count(n);
    std::vector<double> work(n * simd::kCosineTile);
    rk.norms(k.data(), D, N, D, kss.data());
    rk.norms(q.data(), D, N, D, qss.data());
    for (std::size_t r = 0; r < n; ++r) {
      ks[r] = 1.0 / std::sqrt(kss[r]);
      qs[r] = 1.0 / std::sqrt(qss[r]);
    }
    double pass = 1e9, gram = 1e9;
    for (long c = 0; c < calls; ++c) {
      const double t0 = cpu_seconds();
      rk.cosine({k.data(), D, ks.data(), q.data(), D, qs.data(), N, D, 0.3, scores.data(), cand.data(),
                 value.data(), count.data(), work.data()});
      const double t1 = cpu_seconds();
      rk.gram({k.data(), D, q.data(), D, N, D, dots.data(), kss.data(), qss.data()});
      const double t2 = cpu_seconds();
      pass = std::min(pass, t1 - t0);
      gram = std::min(gram, t2 - t1);
    }
    double diff = 0.0;
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t i = 0; i < n; ++i) {
        const double cosine = dots[j * n + i] / (std::sqrt(kss[j]) * std::sqrt(qss[i]));
        diff = std::max(diff, std::fabs(static_cast<double>(scores[j * n + i]) - cosine));
      }
    }
    std::printf("pass %ld %ld %.9g %.9g %.3g\n", N, D, pass, gram, diff);
  }
  std::printf("peak %.1f %d\n", (wide ? peak_avx512() : peak_avx2()) / 1e9, wide ? 16 : 8);
  return 0;
}
