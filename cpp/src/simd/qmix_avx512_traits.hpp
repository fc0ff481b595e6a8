#pragma once
// The AVX-512 vector traits of the qmix kernels (qmix_kernels.inl), shared by the units compiled with AVX-512
// enabled (qmix_avx512.cpp, qmix_amx.cpp). Internal linkage: include only from such a unit.
#include <immintrin.h>

namespace toporoute::simd {
namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int W = 16;
  static constexpr int kDenseMR = 6, kDenseNP = 4, kGruMR = 8;

  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V a) { _mm512_storeu_ps(p, a); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V abs(V a) { return _mm512_abs_ps(a); }
  static V floor(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  static V round(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V pow2i(V n) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
  }
  static V ldexp(V y, V n) { return _mm512_scalef_ps(y, n); }
  static V recip(V d) {  // 14-bit estimate, one Newton step: r + r (1 - d r)
    const V r = _mm512_rcp14_ps(d);
    return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(1.0f)), r);
  }
  static float hsum(V a) { return _mm512_reduce_add_ps(a); }
};

}  // namespace
}  // namespace toporoute::simd
