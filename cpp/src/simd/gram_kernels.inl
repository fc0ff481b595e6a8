// The gram driver, written once for every ISA: include it, after defining the ISA's vector traits, from that
// ISA's own translation unit only (gram_generic.cpp, gram_avx2.cpp, gram_avx512.cpp), so each instantiation is
// compiled with its unit's flags and keeps internal linkage.
//
// Traits T supply:
//   V                        W float64 lanes; Mask: the lanes a partial step loads
//   W, kRows, kCols          lanes per vector; register block of the dot products (kRows k rows x kCols q rows)
//   all(), first(n)          masks of all W lanes / of the first n (0 < n < W)
//   load<Tail>(p, m)         W floats from p widened to float64 (Tail: only the lanes of m, the others 0)
//   zero(), fma(a, b, c)     0 and a * b + c per lane (a float product is exact in float64, so rounding once)
//   hsum(v)                  the lanes' sum, in the ISA's fixed order
// Each dot product has its own W accumulators over D and a fixed reduction, so results are deterministic and
// independent of N and of the block a row falls in. Rows past N in the last block repeat row N - 1 and their
// results are dropped.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "gram.hpp"

namespace toporoute::simd {
namespace {

// Runs step(x, tail, mask) over the columns [0, D) in steps of W, the last one partial.
template <class T, class Step>
inline void over_columns(std::int64_t D, Step&& step) {
  std::int64_t x = 0;
  for (; x + T::W <= D; x += T::W) step(x, std::false_type{}, T::all());
  if (x < D) step(x, std::true_type{}, T::first(D - x));
}

// out[r][c] = a_r . b_c over D columns.
template <class T, int R, int C>
inline void cross_block(const float* const a[R], const float* const b[C], std::int64_t D, double out[R][C]) {
  using V = typename T::V;
  V acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = T::zero();
  over_columns<T>(D, [&](std::int64_t x, auto tail, typename T::Mask m) {
    V bv[C];
    for (int c = 0; c < C; ++c) bv[c] = T::template load<decltype(tail)::value>(b[c] + x, m);
    for (int r = 0; r < R; ++r) {
      const V av = T::template load<decltype(tail)::value>(a[r] + x, m);
      for (int c = 0; c < C; ++c) acc[r][c] = T::fma(av, bv[c], acc[r][c]);
    }
  });
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) out[r][c] = T::hsum(acc[r][c]);
}

// out[r] = |a_r|^2 over D columns.
template <class T, int R>
inline void sumsq_block(const float* const a[R], std::int64_t D, double out[R]) {
  using V = typename T::V;
  V acc[R];
  for (int r = 0; r < R; ++r) acc[r] = T::zero();
  over_columns<T>(D, [&](std::int64_t x, auto tail, typename T::Mask m) {
    for (int r = 0; r < R; ++r) {
      const V v = T::template load<decltype(tail)::value>(a[r] + x, m);
      acc[r] = T::fma(v, v, acc[r]);
    }
  });
  for (int r = 0; r < R; ++r) out[r] = T::hsum(acc[r]);
}

// The R rows of base (row stride sn) from r0, clamped to the last of N.
template <int R>
inline void block_rows(const float* base, std::int64_t sn, std::int64_t r0, std::int64_t N, const float* out[R]) {
  for (std::int64_t r = 0; r < R; ++r) out[r] = base + std::min(r0 + r, N - 1) * sn;
}

// Squared norms of N rows, R at a time, into out[0, N).
template <class T, int R>
inline void row_norms(const float* base, std::int64_t sn, std::int64_t N, std::int64_t D, double* out) {
  const float* rows[R];
  double norms[R];
  for (std::int64_t r0 = 0; r0 < N; r0 += R) {
    block_rows<R>(base, sn, r0, N, rows);
    sumsq_block<T, R>(rows, D, norms);
    for (std::int64_t r = 0; r < R && r0 + r < N; ++r) out[r0 + r] = norms[r];
  }
}

// out[r] = k[r] . q for count rows k[r], each equal to gram_driver's entry for the same two rows (every entry has
// its own accumulators); four rows at a time for four independent FMA chains.
template <class T>
void dots_driver(const float* const* k, std::int64_t count, const float* q, std::int64_t D, double* out) {
  constexpr int R = 4;
  const float* kr[R];
  const float* qr[1] = {q};
  double block[R][1];
  for (std::int64_t r0 = 0; r0 < count; r0 += R) {
    for (std::int64_t r = 0; r < R; ++r) kr[r] = k[std::min(r0 + r, count - 1)];
    cross_block<T, R, 1>(kr, qr, D, block);
    for (std::int64_t r = 0; r < R && r0 + r < count; ++r) out[r0 + r] = block[r][0];
  }
}

// Squared norms equal to gram_driver's.
template <class T>
void norms_driver(const float* rows, std::int64_t sn, std::int64_t N, std::int64_t D, double* out) {
  row_norms<T, T::kCols>(rows, sn, N, D, out);
}

template <class T>
void gram_driver(const GramArgs& a) {
  constexpr int R = T::kRows, C = T::kCols;
  const std::int64_t N = a.N;
  row_norms<T, C>(a.k, a.k_sn, N, a.D, a.kss);
  row_norms<T, C>(a.q, a.q_sn, N, a.D, a.qss);
  const float* kr[R];
  const float* qr[C];
  double out[R][C];
  for (std::int64_t j0 = 0; j0 < N; j0 += R) {
    block_rows<R>(a.k, a.k_sn, j0, N, kr);
    for (std::int64_t i0 = 0; i0 < N; i0 += C) {
      block_rows<C>(a.q, a.q_sn, i0, N, qr);
      cross_block<T, R, C>(kr, qr, a.D, out);
      for (std::int64_t r = 0; r < R && j0 + r < N; ++r)
        for (std::int64_t c = 0; c < C && i0 + c < N; ++c) a.dots[(j0 + r) * N + i0 + c] = out[r][c];
    }
  }
}

}  // namespace
}  // namespace toporoute::simd
