// AVX2 + FMA gram kernel (compiled with -mavx2 -mfma): floats widened to 4 float64 lanes as they are loaded (no
// staging copy), 2 x 4 register blocks of dot products: 8 independent FMA chains within the 16 ymm registers.
#include <immintrin.h>

#include <cstdint>

namespace toporoute::simd {
namespace {

struct Avx2 {
  using V = __m256d;
  using Mask = __m128i;
  static constexpr int W = 4, kRows = 2, kCols = 4;

  static Mask all() { return _mm_setzero_si128(); }  // unused by full steps
  static Mask first(std::int64_t n) {
    return _mm_cmpgt_epi32(_mm_set1_epi32(static_cast<int>(n)), _mm_setr_epi32(0, 1, 2, 3));
  }
  template <bool Tail>
  static V load(const float* p, Mask m) {
    return _mm256_cvtps_pd(Tail ? _mm_maskload_ps(p, m) : _mm_loadu_ps(p));
  }
  static V zero() { return _mm256_setzero_pd(); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
  static double hsum(V v) {
    const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
  }
};

}  // namespace
}  // namespace toporoute::simd

#include "gram_kernels.inl"

namespace toporoute::simd {

void gram_avx2(const GramArgs& a) { gram_driver<Avx2>(a); }

}  // namespace toporoute::simd
