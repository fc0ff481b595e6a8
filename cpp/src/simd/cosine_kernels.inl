// The float32 pass of route() for large teams (CosineArgs in gram.hpp), written once for every level that has it:
// include it, after defining the level's traits, from that level's own translation unit only (gram_avx2.cpp,
// gram_avx512.cpp), like gram_kernels.inl.
//
// Traits F supply 16 float32 lanes (one AVX-512 register, two AVX2 registers) and a block of kRows k rows x
// kCols q rows:
//   V, zero(), load(p), load_first(p, n), fma(a, b, c)
//     16 lanes; 0; 16 floats from p; the first n (0 < n < 16) and zeros; a * b + c rounded once per lane
//   sums(acc, out)
//     out[r][c] = the lanes' sum of acc[r][c], in one fixed order: halves (l + l+8), then l + l+4, l + l+2, and
//     the last two (a level may reduce several vectors at once, in that order for each).
// Every pair (k_j, q_i) sums its products in 16 lanes (lane l takes the columns d = l mod 16) over pieces of
// kPieceColumns columns; a piece's lanes are summed in float32, the pieces in float64. The rows are read in place
// (unit stride along D, any row stride), so nothing is packed. Every pair runs the same operations in the same
// order whatever its block or the level, so a value depends only on its two rows.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "gram.hpp"

namespace toporoute::simd {
namespace {

// The pairs (j0 + r, i0 + c) of rows kr[r] x qr[c], r < rows, c < cols, into a's outputs.
template <class F>
inline void pair_block(const CosineArgs& a, const float* const* kr, const float* const* qr, std::int64_t j0,
                       std::int64_t i0, std::int64_t rows, std::int64_t cols) {
  constexpr int R = F::kRows, C = F::kCols;
  using V = typename F::V;
  const std::int64_t N = a.N, D = a.D;
  double total[R][C] = {};
  for (std::int64_t p0 = 0; p0 < D; p0 += kPieceColumns) {
    const std::int64_t end = std::min(p0 + kPieceColumns, D);
    V acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = F::zero();
    auto step = [&](std::int64_t x, auto tail) {
      V qv[C];
      for (int c = 0; c < C; ++c) {
        qv[c] = decltype(tail)::value ? F::load_first(qr[c] + x, end - x) : F::load(qr[c] + x);
      }
      for (int r = 0; r < R; ++r) {
        const V kv = decltype(tail)::value ? F::load_first(kr[r] + x, end - x) : F::load(kr[r] + x);
        for (int c = 0; c < C; ++c) acc[r][c] = F::fma(kv, qv[c], acc[r][c]);
      }
    };
    std::int64_t x = p0;
    for (; x + 16 <= end; x += 16) step(x, std::false_type{});
    if (x < end) step(x, std::true_type{});
    float sums[R][C];
    F::sums(acc, sums);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) total[r][c] += static_cast<double>(sums[r][c]);
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t j = j0 + r;
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::int64_t i = i0 + c;
      const double v = total[r][c] * a.k_scale[j] * a.q_scale[i];
      a.scores[j * N + i] = static_cast<float>(std::min(1.0, std::max(-1.0, v)));
      if (v > a.low) {
        const std::int64_t at = i * N + a.count[i]++;
        a.cand[at] = static_cast<std::int32_t>(j);
        a.value[at] = v;
      }
    }
  }
}

// q rows in tiles that stay in L1 (about 24 KiB) while every block of k rows passes them; for each recipient,
// the blocks of providers come in ascending order.
template <class F>
void cosine_driver(const CosineArgs& a) {
  constexpr int R = F::kRows, C = F::kCols;
  const std::int64_t N = a.N, D = a.D;
  const std::int64_t tile = std::max<std::int64_t>(C, (std::int64_t{6144} / std::max<std::int64_t>(D, 1)) / C * C);
  std::fill(a.count, a.count + N, std::int64_t{0});
  const float* kr[R];
  const float* qr[C];
  for (std::int64_t t0 = 0; t0 < N; t0 += tile) {
    const std::int64_t t1 = std::min(t0 + tile, N);
    for (std::int64_t j0 = 0; j0 < N; j0 += R) {
      for (std::int64_t r = 0; r < R; ++r) kr[r] = a.k + std::min(j0 + r, N - 1) * a.k_sn;
      for (std::int64_t i0 = t0; i0 < t1; i0 += C) {
        for (std::int64_t c = 0; c < C; ++c) qr[c] = a.q + std::min(i0 + c, t1 - 1) * a.q_sn;
        pair_block<F>(a, kr, qr, j0, i0, std::min<std::int64_t>(R, N - j0), std::min<std::int64_t>(C, t1 - i0));
      }
    }
  }
}

}  // namespace
}  // namespace toporoute::simd
