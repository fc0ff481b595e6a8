// AVX2 + FMA gram kernel (compiled with -mavx2 -mfma): floats widened to 4 float64 lanes as they are loaded (no
// staging copy), 2 x 4 register blocks of dot products: 8 independent FMA chains within the 16 ymm registers. And
// the float32 cosine pass of large teams.
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

// The float32 pass: 16 lanes in two registers, 2 x 2 blocks of pairs (8 accumulator registers).
struct Avx2Lanes16 {
  struct V {
    __m256 lo, hi;
  };
  static constexpr int kRows = 2, kCols = 2;
  static V zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static V load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static V load_first(const float* p, std::int64_t n) {
    const __m256i count = _mm256_set1_epi32(static_cast<int>(n));
    const __m256i lo = _mm256_cmpgt_epi32(count, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i hi = _mm256_cmpgt_epi32(count, _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15));
    return {_mm256_maskload_ps(p, lo), _mm256_maskload_ps(p + 8, hi)};
  }
  static V fma(V a, V b, V c) { return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; }
  static void sums(const V (&acc)[kRows][kCols], float (&out)[kRows][kCols]) {
    for (int r = 0; r < kRows; ++r) {
      for (int c = 0; c < kCols; ++c) {
        const __m256 h8 = _mm256_add_ps(acc[r][c].lo, acc[r][c].hi);
        const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
        const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
        out[r][c] = _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1)));
      }
    }
  }
};

}  // namespace
}  // namespace toporoute::simd

#include "cosine_kernels.inl"
#include "gram_kernels.inl"

namespace toporoute::simd {

void gram_avx2(const GramArgs& a) { gram_driver<Avx2>(a); }

const RouteKernels kRouteAvx2 = {gram_avx2, dots_driver<Avx2>, norms_driver<Avx2>, cosine_driver<Avx2Lanes16>};

}  // namespace toporoute::simd
