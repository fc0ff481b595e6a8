// AVX2 + FMA kernel (compiled with -mavx2 -mfma). Same scheme as the AVX-512 kernel (widen on load, no staging)
// with 2 x 4 register blocks: 8 independent FMA chains within the 16 ymm registers.
#include <immintrin.h>

#include <algorithm>

#include "simd/gram.hpp"

namespace toporoute::simd {
namespace {

template <bool Tail>
inline __m256d load4(const float* p, __m128i m) {
  return _mm256_cvtps_pd(Tail ? _mm_maskload_ps(p, m) : _mm_loadu_ps(p));
}

inline __m128i tail_mask(std::int64_t n) {  // first n of 4 lanes on
  return _mm_cmpgt_epi32(_mm_set1_epi32(static_cast<int>(n)), _mm_setr_epi32(0, 1, 2, 3));
}

inline double hsum(__m256d v) {
  __m128d lo = _mm256_castpd256_pd128(v);
  const __m128d hi = _mm256_extractf128_pd(v, 1);
  lo = _mm_add_pd(lo, hi);
  return _mm_cvtsd_f64(_mm_add_sd(lo, _mm_unpackhi_pd(lo, lo)));
}

template <bool Tail>
inline void block_step(const float* const a[2], const float* const b[4], std::int64_t x, __m128i m,
                       __m256d acc[2][4]) {
  const __m256d a0 = load4<Tail>(a[0] + x, m), a1 = load4<Tail>(a[1] + x, m);
  for (int c = 0; c < 4; ++c) {
    const __m256d bv = load4<Tail>(b[c] + x, m);
    acc[0][c] = _mm256_fmadd_pd(a0, bv, acc[0][c]);
    acc[1][c] = _mm256_fmadd_pd(a1, bv, acc[1][c]);
  }
}

inline void block2x4(const float* const a[2], const float* const b[4], std::int64_t D, double out[2][4]) {
  __m256d acc[2][4];
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 4; ++c) acc[r][c] = _mm256_setzero_pd();
  std::int64_t x = 0;
  for (; x + 4 <= D; x += 4) block_step<false>(a, b, x, _mm_setzero_si128(), acc);
  if (x < D) block_step<true>(a, b, x, tail_mask(D - x), acc);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 4; ++c) out[r][c] = hsum(acc[r][c]);
}

template <bool Tail>
inline void sumsq_step(const float* const a[4], std::int64_t x, __m128i m, __m256d acc[4]) {
  for (int r = 0; r < 4; ++r) {
    const __m256d v = load4<Tail>(a[r] + x, m);
    acc[r] = _mm256_fmadd_pd(v, v, acc[r]);
  }
}

inline void sumsq4(const float* const a[4], std::int64_t D, double out[4]) {
  __m256d acc[4];
  for (int r = 0; r < 4; ++r) acc[r] = _mm256_setzero_pd();
  std::int64_t x = 0;
  for (; x + 4 <= D; x += 4) sumsq_step<false>(a, x, _mm_setzero_si128(), acc);
  if (x < D) sumsq_step<true>(a, x, tail_mask(D - x), acc);
  for (int r = 0; r < 4; ++r) out[r] = hsum(acc[r]);
}

inline void rows(const float* base, std::int64_t sn, std::int64_t r0, std::int64_t count, std::int64_t N,
                 const float** out) {
  for (std::int64_t r = 0; r < count; ++r) out[r] = base + std::min(r0 + r, N - 1) * sn;
}

}  // namespace

void gram_avx2(const GramArgs& a) {
  const std::int64_t N = a.N;
  const float* kr[4];
  const float* qr[4];
  double out[2][4];
  double norms[4];
  for (std::int64_t r0 = 0; r0 < N; r0 += 4) {
    rows(a.k, a.k_sn, r0, 4, N, kr);
    sumsq4(kr, a.D, norms);
    for (std::int64_t r = 0; r < 4 && r0 + r < N; ++r) a.kss[r0 + r] = norms[r];
    rows(a.q, a.q_sn, r0, 4, N, qr);
    sumsq4(qr, a.D, norms);
    for (std::int64_t r = 0; r < 4 && r0 + r < N; ++r) a.qss[r0 + r] = norms[r];
  }
  for (std::int64_t j0 = 0; j0 < N; j0 += 2) {
    rows(a.k, a.k_sn, j0, 2, N, kr);
    for (std::int64_t i0 = 0; i0 < N; i0 += 4) {
      rows(a.q, a.q_sn, i0, 4, N, qr);
      block2x4(kr, qr, a.D, out);
      for (std::int64_t r = 0; r < 2 && j0 + r < N; ++r)
        for (std::int64_t c = 0; c < 4 && i0 + c < N; ++c) a.dots[(j0 + r) * N + i0 + c] = out[r][c];
    }
  }
}

}  // namespace toporoute::simd
