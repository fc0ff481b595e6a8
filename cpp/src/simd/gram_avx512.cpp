// AVX-512 kernel (compiled with -mavx512f -mavx512dq -mavx512vl). Floats are widened to float64 as they are
// loaded (no staging copy), and the N^2 dot products run as 4 x 4 register blocks: 16 independent FMA chains
// per step keep the FMA units busy instead of waiting on one chain's latency. Rows past N in the last block
// repeat row N - 1 and their results are dropped.
// GCC 12 flags its own _mm512_cvtps_pd (an intentionally undefined register in avx512fintrin.h) as
// maybe-uninitialized once inlined here; the warning is about the header, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>

#include "simd/gram.hpp"

namespace toporoute::simd {
namespace {

template <bool Tail>
inline __m512d load8(const float* p, __mmask8 m) {
  return _mm512_cvtps_pd(Tail ? _mm256_maskz_loadu_ps(m, p) : _mm256_loadu_ps(p));
}

template <bool Tail>
inline void block_step(const float* const a[4], const float* const b[4], std::int64_t x, __mmask8 m,
                       __m512d acc[4][4]) {
  __m512d bv[4];
  for (int c = 0; c < 4; ++c) bv[c] = load8<Tail>(b[c] + x, m);
  for (int r = 0; r < 4; ++r) {
    const __m512d av = load8<Tail>(a[r] + x, m);
    for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_fmadd_pd(av, bv[c], acc[r][c]);
  }
}

// out[r][c] = a_r . b_c over D columns.
inline void block4x4(const float* const a[4], const float* const b[4], std::int64_t D, double out[4][4]) {
  __m512d acc[4][4];
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_setzero_pd();
  std::int64_t x = 0;
  for (; x + 8 <= D; x += 8) block_step<false>(a, b, x, 0xFF, acc);
  if (x < D) block_step<true>(a, b, x, static_cast<__mmask8>((1u << (D - x)) - 1u), acc);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) out[r][c] = _mm512_reduce_add_pd(acc[r][c]);
}

template <bool Tail>
inline void sumsq_step(const float* const a[4], std::int64_t x, __mmask8 m, __m512d acc[4]) {
  for (int r = 0; r < 4; ++r) {
    const __m512d v = load8<Tail>(a[r] + x, m);
    acc[r] = _mm512_fmadd_pd(v, v, acc[r]);
  }
}

inline void sumsq4(const float* const a[4], std::int64_t D, double out[4]) {
  __m512d acc[4];
  for (int r = 0; r < 4; ++r) acc[r] = _mm512_setzero_pd();
  std::int64_t x = 0;
  for (; x + 8 <= D; x += 8) sumsq_step<false>(a, x, 0xFF, acc);
  if (x < D) sumsq_step<true>(a, x, static_cast<__mmask8>((1u << (D - x)) - 1u), acc);
  for (int r = 0; r < 4; ++r) out[r] = _mm512_reduce_add_pd(acc[r]);
}

inline void rows4(const float* base, std::int64_t sn, std::int64_t r0, std::int64_t N, const float* out[4]) {
  for (std::int64_t r = 0; r < 4; ++r) out[r] = base + std::min(r0 + r, N - 1) * sn;
}

}  // namespace

void gram_avx512(const GramArgs& a) {
  const std::int64_t N = a.N;
  const float* kr[4];
  const float* qr[4];
  double out[4][4];
  double norms[4];
  for (std::int64_t j0 = 0; j0 < N; j0 += 4) {
    rows4(a.k, a.k_sn, j0, N, kr);
    rows4(a.q, a.q_sn, j0, N, qr);
    sumsq4(kr, a.D, norms);
    for (std::int64_t r = 0; r < 4 && j0 + r < N; ++r) a.kss[j0 + r] = norms[r];
    sumsq4(qr, a.D, norms);
    for (std::int64_t r = 0; r < 4 && j0 + r < N; ++r) a.qss[j0 + r] = norms[r];
    for (std::int64_t i0 = 0; i0 < N; i0 += 4) {
      rows4(a.q, a.q_sn, i0, N, qr);
      block4x4(kr, qr, a.D, out);
      for (std::int64_t r = 0; r < 4 && j0 + r < N; ++r)
        for (std::int64_t c = 0; c < 4 && i0 + c < N; ++c) a.dots[(j0 + r) * N + i0 + c] = out[r][c];
    }
  }
}

}  // namespace toporoute::simd
