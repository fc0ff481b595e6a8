#pragma once
/// \file bandit_draw.hpp
/// The random draws of bandit_select, one copy for the CPU core (cpp/src/bandit.cpp) and the CUDA kernel
/// (kernels/stats.cu): Philox4x32-10, the uniforms, one Marsaglia-Tsang gamma attempt, the boost of shapes < 1
/// and theta = X / (X + Y). The counter layout and every float64 step are those of
/// python/toporoute/backends/_reference_bandit.py, in its order.
///
/// Rounding: every product that feeds an addition goes through mul(), which rounds it on its own: on the device
/// with __dmul_rn (never contracted into an FMA), on the host as a plain product in a file compiled with
/// -ffp-contract=off. sqrt and division are correctly rounded on both. log, cos, exp and pow are the C library's
/// on the host (as the reference's math.* calls) and CUDA's on the device; both are within an ulp or two of the
/// exact value, so the two backends draw the same theta except when such an ulp moves theta across a float32
/// rounding boundary or flips an acceptance test (tests/ops/test_cuda_stats.py measures how rarely).
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TOPOROUTE_HD __host__ __device__ __forceinline__
#else
#define TOPOROUTE_HD inline
#endif

namespace toporoute::draw {

constexpr std::uint32_t kBoostBlock = 0xFFFFFFFFu;  ///< c0 of the block whose first uniform boosts a draw
constexpr double kHalfPi = 3.141592653589793 / 2.0;

/// a * b rounded to double before any later addition (no FMA contraction on either backend).
TOPOROUTE_HD double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

// The transcendental functions: CUDA's on the device, the C library's on the host.
#if defined(__CUDA_ARCH__)
#define TOPOROUTE_DRAW_MATH(f) ::f
#else
#define TOPOROUTE_DRAW_MATH(f) std::f
#endif
TOPOROUTE_HD double log_(double x) { return TOPOROUTE_DRAW_MATH(log)(x); }
TOPOROUTE_HD double cos_(double x) { return TOPOROUTE_DRAW_MATH(cos)(x); }
TOPOROUTE_HD double exp_(double x) { return TOPOROUTE_DRAW_MATH(exp)(x); }
TOPOROUTE_HD double pow_(double x, double y) { return TOPOROUTE_DRAW_MATH(pow)(x, y); }
TOPOROUTE_HD double sqrt_(double x) { return TOPOROUTE_DRAW_MATH(sqrt)(x); }
#undef TOPOROUTE_DRAW_MATH

/// Philox4x32-10 of the counter `ctr` under the key (seed mod 2^32, seed >> 32), in place.
TOPOROUTE_HD void philox(std::uint32_t ctr[4], std::uint64_t seed) {
  std::uint32_t k0 = static_cast<std::uint32_t>(seed);
  std::uint32_t k1 = static_cast<std::uint32_t>(seed >> 32);
  std::uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  for (int r = 0; r < 10; ++r) {
    const std::uint64_t p0 = std::uint64_t{0xD2511F53u} * c0;
    const std::uint64_t p1 = std::uint64_t{0xCD9E8D57u} * c2;
    c0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1 ^ k0;
    c1 = static_cast<std::uint32_t>(p1);
    c2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c3 = static_cast<std::uint32_t>(p0);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  ctr[0] = c0;
  ctr[1] = c1;
  ctr[2] = c2;
  ctr[3] = c3;
}

/// (0, 1] from 53 random bits of (a, b), and from the 32 bits of w (both exact in double).
TOPOROUTE_HD double u53(std::uint32_t a, std::uint32_t b) {
  const std::uint64_t x = (std::uint64_t{a >> 5} << 26) | (b >> 6);
  return static_cast<double>(static_cast<std::int64_t>(x + 1)) * 0x1p-53;  // signed: one conversion instruction
}
TOPOROUTE_HD double u32(std::uint32_t w) { return static_cast<double>(std::int64_t{w} + 1) * 0x1p-32; }
/// (0, 1] from the low 31 bits of w.
TOPOROUTE_HD double u31(std::uint32_t w) {
  return static_cast<double>(static_cast<std::int32_t>(w & 0x7FFFFFFFu) + 1) * 0x1p-31;
}

/// Box-Muller's cos(2 pi U) as +-cos(pi/2 V): the sign from the top bit of w, V = u31(w) (see the reference).
TOPOROUTE_HD double signed_cos(std::uint32_t w, double c) { return (w >> 31) != 0 ? -c : c; }

/// Marsaglia-Tsang constants of one gamma draw of shape a (boosted when a < 1).
struct GammaShape {
  double a, d, c;
  bool boosted;
};

TOPOROUTE_HD GammaShape gamma_shape(double a) {
  const bool boosted = a < 1.0;
  const double a1 = boosted ? a + 1.0 : a;
  const double d = a1 - 1.0 / 3.0;
  return {a, d, 1.0 / sqrt_(mul(9.0, d)), boosted};
}

/// One attempt on the block w: true, with *dv = d v, when accepted.
TOPOROUTE_HD bool attempt(const GammaShape& g, const std::uint32_t w[4], double* dv) {
  const double z =
      signed_cos(w[2], mul(sqrt_(mul(-2.0, log_(u53(w[0], w[1])))), cos_(mul(kHalfPi, u31(w[2])))));
  const double u = u32(w[3]);
  double v = 1.0 + mul(g.c, z);
  if (!(v > 0.0)) return false;
  v = mul(mul(v, v), v);
  if (v == 0.0) return false;
  const double x2 = mul(z, z);
  if (u < 1.0 - mul(mul(0.0331, x2), x2) || log_(u) < mul(0.5, x2) + mul(g.d, 1.0 - v + log_(v))) {
    *dv = mul(g.d, v);
    return true;
  }
  return false;
}

/// d v of the first accepted attempt from attempt t0 on, on the stream (lane, graph, step).
TOPOROUTE_HD double attempts_from(const GammaShape& g, std::uint64_t seed, std::uint32_t lane, std::uint32_t graph,
                                  std::uint32_t step, std::uint32_t t0) {
  double dv = 0.0;
  for (std::uint32_t t = t0;; ++t) {
    std::uint32_t w[4] = {t, lane, graph, step};
    philox(w, seed);
    if (attempt(g, w, &dv)) return dv;
  }
}

struct GammaDraw {
  double x;   ///< the draw
  double dv;  ///< d * v before the boost
  double ub;  ///< the boost uniform, 1 when not boosted
};

/// The draw from its d v: times u^(1 / a) of the boost block when the shape was boosted.
TOPOROUTE_HD GammaDraw boost(const GammaShape& g, double dv, std::uint64_t seed, std::uint32_t lane,
                             std::uint32_t graph, std::uint32_t step) {
  if (!g.boosted) return {dv, dv, 1.0};
  std::uint32_t w[4] = {kBoostBlock, lane, graph, step};
  philox(w, seed);
  const double ub = u53(w[0], w[1]);
  return {mul(dv, pow_(ub, 1.0 / g.a)), dv, ub};
}

/// theta = X / (X + Y) as float32; when both draws underflowed, the ratio in log space.
TOPOROUTE_HD float beta_of(const GammaDraw& x, const GammaDraw& y, double a, double b) {
  const double total = x.x + y.x;
  if (total > 0.0) return static_cast<float>(x.x / total);
  const double lx = log_(x.dv) + log_(x.ub) / a;
  const double ly = log_(y.dv) + log_(y.ub) / b;
  return static_cast<float>(1.0 / (1.0 + exp_(ly - lx)));
}

/// theta ~ Beta(a, b) of node `node` of graph `graph` (a, b the float32 shapes widened, finite and > 0): X on
/// lane 2 node, Y on lane 2 node + 1, every attempt from 0 on (the CPU runs attempt 0 of many lanes at once,
/// the same steps).
TOPOROUTE_HD float beta_draw(double a, double b, std::uint64_t seed, std::uint32_t node, std::uint32_t graph,
                             std::uint32_t step) {
  const GammaShape gx = gamma_shape(a), gy = gamma_shape(b);
  const std::uint32_t lx = 2 * node, ly = 2 * node + 1;
  const GammaDraw x = boost(gx, attempts_from(gx, seed, lx, graph, step, 0), seed, lx, graph, step);
  const GammaDraw y = boost(gy, attempts_from(gy, seed, ly, graph, step, 0), seed, ly, graph, step);
  return beta_of(x, y, a, b);
}

}  // namespace toporoute::draw
