// AVX-512 gram kernel (compiled with -mavx512f -mavx512dq -mavx512vl): floats widened to 8 float64 lanes as they
// are loaded (no staging copy), 4 x 4 register blocks of dot products: 16 independent FMA chains per step keep
// the FMA units busy instead of waiting on one chain's latency.
// GCC 12 flags its own _mm512_cvtps_pd (an intentionally undefined register in avx512fintrin.h) as
// maybe-uninitialized once inlined here; the warning is about the header, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

namespace toporoute::simd {
namespace {

struct Avx512 {
  using V = __m512d;
  using Mask = __mmask8;
  static constexpr int W = 8, kRows = 4, kCols = 4;

  static Mask all() { return 0xFF; }
  static Mask first(std::int64_t n) { return static_cast<Mask>((1u << n) - 1u); }
  template <bool Tail>
  static V load(const float* p, Mask m) {
    return _mm512_cvtps_pd(Tail ? _mm256_maskz_loadu_ps(m, p) : _mm256_loadu_ps(p));
  }
  static V zero() { return _mm512_setzero_pd(); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  static double hsum(V v) { return _mm512_reduce_add_pd(v); }
};

}  // namespace
}  // namespace toporoute::simd

#include "gram_kernels.inl"

namespace toporoute::simd {

void gram_avx512(const GramArgs& a) { gram_driver<Avx512>(a); }

}  // namespace toporoute::simd
