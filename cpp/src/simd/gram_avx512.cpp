// AVX-512 gram kernel (compiled with -mavx512f -mavx512dq -mavx512vl): floats widened to 8 float64 lanes as they
// are loaded (no staging copy), 4 x 4 register blocks of dot products: 16 independent FMA chains per step keep
// the FMA units busy instead of waiting on one chain's latency. And the float32 cosine pass of large teams.
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

// The float32 pass: 16 lanes in one register, 4 x 4 blocks of pairs (16 accumulators, 8 loads per step).
struct Avx512Lanes16 {
  using V = __m512;
  static constexpr int kRows = 4, kCols = 4;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_first(const float* p, std::int64_t n) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), p);
  }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  // The 16 sums at once, each in the fixed order: every level adds the halves of two (then four, eight,
  // sixteen) vectors' remaining lanes side by side. Level 1 leaves vector p's l + l+8 (l < 8) in chunks 0-1 or
  // 2-3 of x[p / 2], level 2 its l + l+4 in chunk p % 4 of y[p / 4], level 3 its l + l+2 in lanes 0-1 or 2-3 of
  // chunk p % 4 of z[p / 8], and level 4 its sum in lane 4 (p % 4) + p / 4 of w.
  static void sums(const V (&acc)[kRows][kCols], float (&out)[kRows][kCols]) {
    const V* v = &acc[0][0];
    V x[8], y[4], z[2];
    for (int m = 0; m < 8; ++m) {
      x[m] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], 0x44),
                           _mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], 0xEE));
    }
    for (int n = 0; n < 4; ++n) {
      y[n] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * n], x[2 * n + 1], 0x88),
                           _mm512_shuffle_f32x4(x[2 * n], x[2 * n + 1], 0xDD));
    }
    for (int t = 0; t < 2; ++t) {
      z[t] = _mm512_add_ps(_mm512_shuffle_ps(y[2 * t], y[2 * t + 1], 0x44),
                           _mm512_shuffle_ps(y[2 * t], y[2 * t + 1], 0xEE));
    }
    alignas(64) float w[16];
    _mm512_store_ps(w, _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], 0x88), _mm512_shuffle_ps(z[0], z[1], 0xDD)));
    for (int p = 0; p < 16; ++p) out[p / kCols][p % kCols] = w[4 * (p % 4) + p / 4];
  }
};
static_assert(Avx512Lanes16::kRows * Avx512Lanes16::kCols == 16, "sums reduces 16 vectors");

}  // namespace
}  // namespace toporoute::simd

#include "cosine_kernels.inl"
#include "gram_kernels.inl"

namespace toporoute::simd {

void gram_avx512(const GramArgs& a) { gram_driver<Avx512>(a); }

const RouteKernels kRouteAvx512 = {gram_avx512, dots_driver<Avx512>, norms_driver<Avx512>,
                                   cosine_driver<Avx512Lanes16>};

}  // namespace toporoute::simd
