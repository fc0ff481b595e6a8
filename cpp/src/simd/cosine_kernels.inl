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

// The dot products of rows kr[r] x qr[c] into sums[r * width + c] for r < rows, c < cols.
template <class F>
inline void pair_block(const float* const* kr, const float* const* qr, std::int64_t D, std::int64_t rows,
                       std::int64_t cols, std::int64_t width, double* sums) {
  constexpr int R = F::kRows, C = F::kCols;
  using V = typename F::V;
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
    float piece[R][C];
    F::sums(acc, piece);
    for (std::int64_t r = 0; r < rows; ++r) {  // the pieces in float64: the first stored, the others added
      double* out = sums + r * width;
      if (p0 == 0) {
        for (std::int64_t c = 0; c < cols; ++c) out[c] = static_cast<double>(piece[r][c]);
      } else {
        for (std::int64_t c = 0; c < cols; ++c) out[c] += static_cast<double>(piece[r][c]);
      }
    }
  }
}

// Tile [t0, t0 + width) of recipients, its dot products in sums (N x width): the scores and the lists. Each row
// of providers first in loops the compiler vectorises, then, only where a value is above the floor, the lists.
inline void finish_tile(const CosineArgs& a, std::int64_t t0, std::int64_t width, const double* sums) {
  const std::int64_t N = a.N;
  double v[kCosineTile];
  const double* qs = a.q_scale + t0;
  for (std::int64_t j = 0; j < N; ++j) {
    const double ks = a.k_scale[j];
    const double* row = sums + j * width;
    int above = 0;
    for (std::int64_t c = 0; c < width; ++c) {
      v[c] = row[c] * ks * qs[c];
      above += v[c] > a.low ? 1 : 0;
    }
    float* out = a.scores + j * N + t0;
    for (std::int64_t c = 0; c < width; ++c) {
      const double x = v[c] < -1.0 ? -1.0 : v[c];
      out[c] = static_cast<float>(x > 1.0 ? 1.0 : x);
    }
    if (above == 0) continue;
    for (std::int64_t c = 0; c < width; ++c) {  // rows come in ascending j: each list ascends
      if (v[c] > a.low) {
        const std::int64_t i = t0 + c;
        const std::int64_t at = i * N + a.count[i]++;
        a.cand[at] = static_cast<std::int32_t>(j);
        a.value[at] = v[c];
      }
    }
  }
}

// q rows in tiles that stay in L1 (about 24 KiB, at most kCosineTile rows) while every block of k rows passes
// them, then the tile's scores and lists.
template <class F>
void cosine_driver(const CosineArgs& a) {
  constexpr int R = F::kRows, C = F::kCols;
  static_assert(kCosineTile % C == 0, "tiles hold whole blocks");
  const std::int64_t N = a.N, D = a.D;
  const std::int64_t fit = (std::int64_t{6144} / std::max<std::int64_t>(D, 1)) / C * C;
  const std::int64_t tile = std::min<std::int64_t>(kCosineTile, std::max<std::int64_t>(C, fit));
  std::fill(a.count, a.count + N, std::int64_t{0});
  const float* kr[R];
  const float* qr[C];
  for (std::int64_t t0 = 0; t0 < N; t0 += tile) {
    const std::int64_t t1 = std::min(t0 + tile, N), width = t1 - t0;
    for (std::int64_t j0 = 0; j0 < N; j0 += R) {
      for (std::int64_t r = 0; r < R; ++r) kr[r] = a.k + std::min(j0 + r, N - 1) * a.k_sn;
      for (std::int64_t i0 = t0; i0 < t1; i0 += C) {
        for (std::int64_t c = 0; c < C; ++c) qr[c] = a.q + std::min(i0 + c, t1 - 1) * a.q_sn;
        pair_block<F>(kr, qr, D, std::min<std::int64_t>(R, N - j0), std::min<std::int64_t>(C, t1 - i0), width,
                      a.sums + j0 * width + (i0 - t0));
      }
    }
    finish_tile(a, t0, width, a.sums);
  }
}

}  // namespace
}  // namespace toporoute::simd
