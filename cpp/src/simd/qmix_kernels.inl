// The qmix kernels as templates over a vector-traits type T; included by exactly one translation unit per ISA
// (qmix_generic.cpp, qmix_avx2.cpp, qmix_avx512.cpp) after it defined its traits. Everything here is in an
// unnamed namespace: each unit gets its own copy compiled with its own flags (an inline template with external
// linkage would be merged across units by the linker, and an AVX-512 copy could end up in the generic path).
//
// T provides: V (register type), W (floats per register), kDenseMR / kDenseNP (rows x panels of a Linear
// register block), kGruMR (rows of a GRU register block), and zero, load, store, set1, fma (a b + c), add, sub,
// mul, div, max, min, abs, floor, round (to nearest, ties to even), pow2i (2^n for integral n in [-126, 127]),
// ldexp (y 2^n for such n), recip (1 / d for d >= 1 within a few float32 ulps: the hardware estimate and one
// Newton step instead of a division, which costs as much as the rest of a GRU cell) and hsum.
//
// Register blocking: a Linear block keeps kDenseMR x kDenseNP x (kPanel / W) accumulators, loads each weight
// vector once per k for all its rows and broadcasts each input once per k for all its columns; panels are the
// outer loop so a block's weights (K x kDenseNP x 64 bytes) stay in L1 while every row block of the tile
// passes. A GRU runs in two passes per register of columns: the input side over all rows (r, z and x-side n
// sums, three accumulators per row, parked in the caller's work rows), then the hidden side over all rows,
// which finishes the cell in registers. Each pass keeps only its own K x 3 registers of weights hot in L1
// (about 24 KB at H = 128, where both sides at once would fill the 48 KB L1 and spill to L2) and its three
// accumulators per row leave room for kGruMR = 8 rows on AVX-512. Every output's sum runs in one fixed order
// (bias, input side by k, hidden side by k) whatever the row count or thread.
#include <cmath>
#include <cstdint>

#include "simd/qmix_kernels.hpp"

namespace toporoute::simd {
namespace {

// Cephes expf: exp(x) = 2^n exp(r), |r| <= ln2 / 2, degree-6 polynomial; about 1 ulp on the clamped range (the
// mixer's elu, where exp(x) - 1 near 0 needs it; the GRU gates use the cheaper vexp2 below).
template <class T>
inline typename T::V vexp(typename T::V x) {
  using V = typename T::V;
  x = T::min(T::max(x, T::set1(-87.3365447505531f)), T::set1(88.3762626647949f));
  const V n = T::floor(T::fma(x, T::set1(1.44269504088896341f), T::set1(0.5f)));
  x = T::fma(n, T::set1(-0.693359375f), x);
  x = T::fma(n, T::set1(2.12194440e-4f), x);
  const V xx = T::mul(x, x);
  V y = T::set1(1.9875691500e-4f);
  y = T::fma(y, x, T::set1(1.3981999507e-3f));
  y = T::fma(y, x, T::set1(8.3334519073e-3f));
  y = T::fma(y, x, T::set1(4.1665795894e-2f));
  y = T::fma(y, x, T::set1(1.6666665459e-1f));
  y = T::fma(y, x, T::set1(5.0000001201e-1f));
  y = T::add(T::fma(y, xx, x), T::set1(1.0f));
  return T::ldexp(y, n);
}

// 2^t for the GRU gates: t clamped to [-126, 126] = n + f with n = round(t), |f| <= 1/2, and 2^f by a degree-5
// polynomial (a minimax fit in relative error: 7.5e-8 in exact arithmetic, 2.4e-7 with float32 Horner steps).
// No Cody-Waite split and a shorter polynomial: 6 multiplies or multiply-adds per call against vexp's 10, and the
// gates need no more (a sigmoid's absolute error is at most a quarter of exp's relative one).
template <class T>
inline typename T::V vexp2(typename T::V t) {
  using V = typename T::V;
  t = T::min(T::max(t, T::set1(-126.0f)), T::set1(126.0f));
  const V n = T::round(t);
  const V f = T::sub(t, n);
  V p = T::set1(1.3276472454890609e-3f);
  p = T::fma(p, f, T::set1(9.675541892647743e-3f));
  p = T::fma(p, f, T::set1(5.550713092088699e-2f));
  p = T::fma(p, f, T::set1(2.4022120237350464e-1f));
  p = T::fma(p, f, T::set1(6.931469440460205e-1f));
  p = T::fma(p, f, T::set1(1.0000001192092896f));
  return T::ldexp(p, n);
}

// sigmoid(x) = 1 / (1 + 2^(-x log2 e))
template <class T>
inline typename T::V vsigmoid(typename T::V x) {
  const auto one = T::set1(1.0f);
  return T::recip(T::add(one, vexp2<T>(T::mul(x, T::set1(-1.44269504088896341f)))));
}

// tanh(x) = 2 sigmoid(2x) - 1. Measured over [-100, 100] in steps of 1e-4 against float64: absolute error at
// most 1.1e-7 for the sigmoid and 2.0e-7 for tanh (1e-7 and 1.8e-7 with vexp), all the float32 forward needs.
template <class T>
inline typename T::V vtanh(typename T::V x) {
  const auto one = T::set1(1.0f);
  const auto e = vexp2<T>(T::mul(x, T::set1(-2.88539008177792682f)));
  return T::fma(T::set1(2.0f), T::recip(T::add(one, e)), T::set1(-1.0f));
}

// ------------------------------------------------------------------------------------------------- Linear

template <class T, int MR, int NP>
inline void dense_block(const DenseCall& c, std::int64_t r0, std::int64_t p0) {
  using V = typename T::V;
  constexpr int RPP = static_cast<int>(kPanel) / T::W;  // registers per panel
  constexpr int CR = NP * RPP;
  const std::int64_t K = c.K;
  const float* wp = c.w + p0 * K * kPanel;
  const float* xr[MR];
  for (int r = 0; r < MR; ++r) xr[r] = c.x + (r0 + r) * c.ldx;
  V acc[MR][CR];
  for (int j = 0; j < CR; ++j) {
    const V b = T::load(c.bias + p0 * kPanel + j * T::W);
    for (int r = 0; r < MR; ++r) acc[r][j] = b;
  }
  for (std::int64_t k = 0; k < K; ++k) {
    V w[CR];
    for (int j = 0; j < CR; ++j) w[j] = T::load(wp + (j / RPP) * K * kPanel + k * kPanel + (j % RPP) * T::W);
    for (int r = 0; r < MR; ++r) {
      const V a = T::set1(xr[r][k]);
      for (int j = 0; j < CR; ++j) acc[r][j] = T::fma(a, w[j], acc[r][j]);
    }
  }
  for (int j = 0; j < CR; ++j) {
    const bool relu = p0 + j / RPP < c.relu_panels;
    for (int r = 0; r < MR; ++r) {
      const V v = relu ? T::max(acc[r][j], T::zero()) : acc[r][j];
      T::store(c.y + (r0 + r) * c.ldy + p0 * kPanel + j * T::W, v);
    }
  }
}

// Runtime (rows, panels) of a block -> the template instance.
template <class T, int NP, int MR>
inline void dense_rows(const DenseCall& c, std::int64_t r0, std::int64_t p0, std::int64_t mr) {
  if constexpr (MR > 1) {
    if (mr < MR) return dense_rows<T, NP, MR - 1>(c, r0, p0, mr);
  }
  dense_block<T, MR, NP>(c, r0, p0);
}

template <class T, int NP>
inline void dense_panels(const DenseCall& c, std::int64_t p0, std::int64_t np) {
  if constexpr (NP > 1) {
    if (np < NP) return dense_panels<T, NP - 1>(c, p0, np);
  }
  for (std::int64_t r0 = 0; r0 < c.rows; r0 += T::kDenseMR) {
    const std::int64_t mr = c.rows - r0 < T::kDenseMR ? c.rows - r0 : T::kDenseMR;
    dense_rows<T, NP, T::kDenseMR>(c, r0, p0, mr);
  }
}

template <class T>
void dense(const DenseCall& c) {
  for (std::int64_t p0 = 0; p0 < c.panels; p0 += T::kDenseNP) {
    const std::int64_t np = c.panels - p0 < T::kDenseNP ? c.panels - p0 : T::kDenseNP;
    dense_panels<T, T::kDenseNP>(c, p0, np);
  }
}

// ------------------------------------------------------------------------------------------------ GRUCell

// One side of a GRUCell: r, z and n accumulate in[r][k] times the panel's gate weights (w: K x 3 kPanel).
template <class T, int MR>
inline void gru_gates(const float* w, std::int64_t K, const float* const (&in)[MR], typename T::V (&r_acc)[MR],
                      typename T::V (&z_acc)[MR], typename T::V (&n_acc)[MR]) {
  using V = typename T::V;
  constexpr std::int64_t G = 3 * kPanel;
  for (std::int64_t k = 0; k < K; ++k) {
    const V wr = T::load(w + k * G), wz = T::load(w + k * G + kPanel), wn = T::load(w + k * G + 2 * kPanel);
    for (int r = 0; r < MR; ++r) {
      const V a = T::set1(in[r][k]);
      r_acc[r] = T::fma(a, wr, r_acc[r]);
      z_acc[r] = T::fma(a, wz, z_acc[r]);
      n_acc[r] = T::fma(a, wn, n_acc[r]);
    }
  }
}

// The cells of MR rows from their pre-activations, into r: r, z = sigmoid, n = tanh(nx + r nh), h' = z h +
// (1 - z) n. Stage by stage over the rows, unrolled, so the rows' independent exp chains interleave.
template <class T, int MR, bool HasH>
inline void gru_cells(typename T::V (&r)[MR], typename T::V (&z)[MR], typename T::V (&nx)[MR],
                      typename T::V (&nh)[MR], const float* const (&h)[MR], std::int64_t col) {
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) r[i] = vsigmoid<T>(r[i]);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) z[i] = vsigmoid<T>(z[i]);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) nx[i] = vtanh<T>(T::fma(r[i], nh[i], nx[i]));
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    if constexpr (HasH) {
      r[i] = T::fma(z[i], T::sub(T::load(h[i] + col), nx[i]), nx[i]);  // n + z (h - n)
    } else {
      r[i] = T::sub(nx[i], T::mul(z[i], nx[i]));
    }
  }
}

// Input side of one register of columns for MR rows. With a hidden state the r, z and x-side n sums go to
// work (3 registers per row) for the hidden-side pass; without one the cell finishes here (its h products
// are zero: the hidden-side n is its bias).
template <class T, int MR, bool HasH>
inline void gru_x_block(const GruCall& c, std::int64_t r0, std::int64_t p, int off, float* work) {
  using V = typename T::V;
  constexpr std::int64_t G = 3 * kPanel;
  const float* bias = c.bias + p * 4 * kPanel + off * T::W;
  V ar[MR], az[MR], an[MR];
  const V br = T::load(bias), bz = T::load(bias + kPanel), bn = T::load(bias + 2 * kPanel);
  for (int r = 0; r < MR; ++r) {
    ar[r] = br;
    az[r] = bz;
    an[r] = bn;
  }
  const float* xr[MR];
  for (int r = 0; r < MR; ++r) xr[r] = c.x + (r0 + r) * c.ldx;
  gru_gates<T, MR>(c.wx + p * c.Kx * G + off * T::W, c.Kx, xr, ar, az, an);
  if constexpr (HasH) {
    for (int r = 0; r < MR; ++r) {
      float* wk = work + (r0 + r) * 3 * T::W;
      T::store(wk, ar[r]);
      T::store(wk + T::W, az[r]);
      T::store(wk + 2 * T::W, an[r]);
    }
  } else {
    V ah[MR];
    for (int r = 0; r < MR; ++r) ah[r] = T::load(bias + 3 * kPanel);
    const float* none[MR] = {};
    gru_cells<T, MR, false>(ar, az, an, ah, none, 0);
    const std::int64_t col = p * kPanel + off * T::W;
    for (int r = 0; r < MR; ++r) T::store(c.out + (r0 + r) * c.ldo + col, ar[r]);
  }
}

// Hidden side of one register of columns for MR rows, starting from the input side's sums in work.
template <class T, int MR>
inline void gru_h_block(const GruCall& c, std::int64_t r0, std::int64_t p, int off, const float* work) {
  using V = typename T::V;
  constexpr std::int64_t G = 3 * kPanel;
  const std::int64_t col = p * kPanel + off * T::W;
  V ar[MR], az[MR], ah[MR];
  const V bh = T::load(c.bias + p * 4 * kPanel + 3 * kPanel + off * T::W);
  for (int r = 0; r < MR; ++r) {
    const float* wk = work + (r0 + r) * 3 * T::W;
    ar[r] = T::load(wk);
    az[r] = T::load(wk + T::W);
    ah[r] = bh;
  }
  const float* hr[MR];
  for (int r = 0; r < MR; ++r) hr[r] = c.h + (r0 + r) * c.ldh;
  gru_gates<T, MR>(c.wh + p * c.H * G + off * T::W, c.H, hr, ar, az, ah);
  V an[MR];
  for (int r = 0; r < MR; ++r) an[r] = T::load(work + (r0 + r) * 3 * T::W + 2 * T::W);
  gru_cells<T, MR, true>(ar, az, an, ah, hr, col);
  for (int r = 0; r < MR; ++r) T::store(c.out + (r0 + r) * c.ldo + col, ar[r]);
}

template <class T, int MR, bool HasH>
inline void gru_x_rows(const GruCall& c, std::int64_t r0, std::int64_t p, int off, std::int64_t mr, float* work) {
  if constexpr (MR > 1) {
    if (mr < MR) return gru_x_rows<T, MR - 1, HasH>(c, r0, p, off, mr, work);
  }
  gru_x_block<T, MR, HasH>(c, r0, p, off, work);
}

template <class T, int MR>
inline void gru_h_rows(const GruCall& c, std::int64_t r0, std::int64_t p, int off, std::int64_t mr,
                       const float* work) {
  if constexpr (MR > 1) {
    if (mr < MR) return gru_h_rows<T, MR - 1>(c, r0, p, off, mr, work);
  }
  gru_h_block<T, MR>(c, r0, p, off, work);
}

// Per register of columns, the input side over all rows, then the hidden side over all rows: each pass keeps
// only its own K x 3 registers of weights hot in L1 (both sides together, K = 2 x 128, would not fit) and
// three accumulators per row, so a block covers kGruMR rows. Each output's sum runs in one fixed order.
template <class T, bool HasH>
void gru_all(const GruCall& c) {
  constexpr int RPP = static_cast<int>(kPanel) / T::W;
  for (std::int64_t p = 0; p < c.panels; ++p) {
    for (int off = 0; off < RPP; ++off) {
      for (std::int64_t r0 = 0; r0 < c.rows; r0 += T::kGruMR) {
        const std::int64_t mr = c.rows - r0 < T::kGruMR ? c.rows - r0 : T::kGruMR;
        gru_x_rows<T, T::kGruMR, HasH>(c, r0, p, off, mr, c.work);
      }
      if constexpr (HasH) {
        for (std::int64_t r0 = 0; r0 < c.rows; r0 += T::kGruMR) {
          const std::int64_t mr = c.rows - r0 < T::kGruMR ? c.rows - r0 : T::kGruMR;
          gru_h_rows<T, T::kGruMR>(c, r0, p, off, mr, c.work);
        }
      }
    }
  }
}

template <class T>
void gru(const GruCall& c) {
  if (c.h != nullptr) {
    gru_all<T, true>(c);
  } else {
    gru_all<T, false>(c);
  }
}

// -------------------------------------------------------------------------------------- LayerNorm, mean, mix

template <class T>
void layer_norm(const NormCall& c) {
  using V = typename T::V;
  const std::int64_t H = c.H, full = H / T::W * T::W;
  for (std::int64_t r = 0; r < c.rows; ++r) {
    float* x = c.x + r * c.ld;
    V s = T::zero();
    for (std::int64_t j = 0; j < full; j += T::W) s = T::add(s, T::load(x + j));
    float sum = T::hsum(s);
    for (std::int64_t j = full; j < H; ++j) sum += x[j];
    const float mean = sum / static_cast<float>(H);
    const V mv = T::set1(mean);
    V v = T::zero();
    for (std::int64_t j = 0; j < full; j += T::W) {
      const V d = T::sub(T::load(x + j), mv);
      v = T::fma(d, d, v);
    }
    float var = T::hsum(v);
    for (std::int64_t j = full; j < H; ++j) var += (x[j] - mean) * (x[j] - mean);
    var /= static_cast<float>(H);
    const float rstd = 1.0f / std::sqrt(var + c.eps);
    const V rv = T::set1(rstd);
    for (std::int64_t j = 0; j < full; j += T::W) {
      const V y = T::mul(T::sub(T::load(x + j), mv), rv);
      T::store(x + j, T::fma(y, T::load(c.gamma + j), T::load(c.beta + j)));
    }
    for (std::int64_t j = full; j < H; ++j) x[j] = (x[j] - mean) * rstd * c.gamma[j] + c.beta[j];
  }
}

template <class T>
void aggregate(const AggregateCall& c) {
  using V = typename T::V;
  for (std::int64_t i = 0; i < c.N; ++i) {
    float* out = c.out + i * c.ldo;
    const std::int32_t* nbr = c.nbr + i * c.N;
    const std::int32_t cnt = c.cnt[i];
    const V deg = T::set1(static_cast<float>(cnt > 0 ? cnt : 1));
    for (std::int64_t j = 0; j < c.cols; j += T::W) {
      V acc = T::zero();
      for (std::int32_t t = 0; t < cnt; ++t) acc = T::add(acc, T::load(c.m + nbr[t] * c.ldm + j));
      T::store(out + j, T::div(acc, deg));
    }
  }
}

template <class T>
void mix_combine(const MixCombineCall& c) {
  using V = typename T::V;
  const V one = T::set1(1.0f);
  for (std::int64_t r = 0; r < c.rows; ++r) {
    const float* q = c.q + r * c.ldq;
    const float* w1 = c.w1 + r * c.ldw1;
    const float* b1 = c.b1 + r * c.ldb1;
    const float* w2 = c.w2 + r * c.ldw2;
    V acc = T::zero();
    for (std::int64_t m = 0; m < c.Mp; m += T::W) {
      V pre = T::load(b1 + m);
      for (std::int64_t a = 0; a < c.n_agents; ++a) pre = T::fma(T::set1(q[a]), T::abs(T::load(w1 + a * c.Mp + m)), pre);
      // elu: pre for pre > 0, exp(pre) - 1 otherwise
      const V hid = T::add(T::max(pre, T::zero()), T::sub(vexp<T>(T::min(pre, T::zero())), one));
      acc = T::fma(hid, T::abs(T::load(w2 + m)), acc);
    }
    c.out[r] = T::hsum(acc) + c.b2[r * c.ldb2];
  }
}

template <class T>
constexpr QmixKernels kernel_table() {
  return {&dense<T>, &gru<T>, &layer_norm<T>, &aggregate<T>, &mix_combine<T>};
}

}  // namespace
}  // namespace toporoute::simd
