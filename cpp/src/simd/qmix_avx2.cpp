// AVX2 + FMA qmix kernels (compiled with -mavx2 -mfma): 8-float registers, a panel is two of them. Linear blocks
// of 6 rows x 1 panel (12 accumulators + 2 weight registers + 1 broadcast within the 16 ymm registers), GRU
// passes of 4 rows x 3 gates (12 accumulators + 3 weight registers + 1 broadcast).
#include <immintrin.h>

#include "simd/qmix_kernels.hpp"

namespace toporoute::simd {
namespace {

struct Avx2 {
  using V = __m256;
  static constexpr int W = 8;
  static constexpr int kDenseMR = 6, kDenseNP = 1, kGruMR = 4;

  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V a) { _mm256_storeu_ps(p, a); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V abs(V a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  static V floor(V a) { return _mm256_floor_ps(a); }
  static V round(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V pow2i(V n) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }
  static V ldexp(V y, V n) { return _mm256_mul_ps(y, pow2i(n)); }
  static V recip(V d) {  // 12-bit estimate, one Newton step: r + r (1 - d r)
    const V r = _mm256_rcp_ps(d);
    return _mm256_fmadd_ps(r, _mm256_fnmadd_ps(d, r, _mm256_set1_ps(1.0f)), r);
  }
  static float hsum(V a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
};

}  // namespace
}  // namespace toporoute::simd

#include "simd/qmix_kernels.inl"

namespace toporoute::simd {

const QmixKernels& qmix_kernels_avx2() {
  static constexpr QmixKernels kernels = kernel_table<Avx2>();
  return kernels;
}

}  // namespace toporoute::simd
