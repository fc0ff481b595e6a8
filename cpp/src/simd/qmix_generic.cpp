// Baseline qmix kernels: portable C++ compiled without ISA flags. The "register" is four floats handled by
// plain loops, which compilers turn into baseline vector code (SSE2 on x86-64, NEON on arm64).
#include <cmath>
#include <cstring>

#include "simd/qmix_kernels.hpp"

namespace toporoute::simd {
namespace {

struct Generic {
  struct V {
    float v[4];
  };
  static constexpr int W = 4;
  static constexpr int kDenseMR = 4, kDenseNP = 1, kGruMR = 2;

  template <class F>
  static V map(F f) {
    V r;
    for (int i = 0; i < W; ++i) r.v[i] = f(i);
    return r;
  }
  static V zero() { return map([](int) { return 0.0f; }); }
  static V load(const float* p) { return map([p](int i) { return p[i]; }); }
  static void store(float* p, V a) {
    for (int i = 0; i < W; ++i) p[i] = a.v[i];
  }
  static V set1(float x) { return map([x](int) { return x; }); }
  static V fma(V a, V b, V c) { return map([&](int i) { return a.v[i] * b.v[i] + c.v[i]; }); }
  static V add(V a, V b) { return map([&](int i) { return a.v[i] + b.v[i]; }); }
  static V sub(V a, V b) { return map([&](int i) { return a.v[i] - b.v[i]; }); }
  static V mul(V a, V b) { return map([&](int i) { return a.v[i] * b.v[i]; }); }
  static V div(V a, V b) { return map([&](int i) { return a.v[i] / b.v[i]; }); }
  static V max(V a, V b) { return map([&](int i) { return a.v[i] > b.v[i] ? a.v[i] : b.v[i]; }); }
  static V min(V a, V b) { return map([&](int i) { return a.v[i] < b.v[i] ? a.v[i] : b.v[i]; }); }
  static V abs(V a) { return map([&](int i) { return std::fabs(a.v[i]); }); }
  static V floor(V a) { return map([&](int i) { return std::floor(a.v[i]); }); }
  static V round(V a) { return map([&](int i) { return std::nearbyint(a.v[i]); }); }
  static V pow2i(V n) { return map([&](int i) { return std::ldexp(1.0f, static_cast<int>(n.v[i])); }); }
  static V ldexp(V y, V n) { return mul(y, pow2i(n)); }
  static V recip(V d) { return div(set1(1.0f), d); }
  static float hsum(V a) { return (a.v[0] + a.v[1]) + (a.v[2] + a.v[3]); }
};

}  // namespace
}  // namespace toporoute::simd

#include "simd/qmix_kernels.inl"

namespace toporoute::simd {

const QmixKernels& qmix_kernels_generic() {
  static constexpr QmixKernels kernels = kernel_table<Generic>();
  return kernels;
}

namespace {

// The bf16 truncation of x (its top 16 bits) and x minus it (exact in float32).
std::uint16_t bf16_trunc(float x, float* rest) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  const std::uint32_t hi = bits & 0xffff0000u;
  float h;
  std::memcpy(&h, &hi, sizeof(h));
  *rest = x - h;
  return static_cast<std::uint16_t>(hi >> 16);
}

}  // namespace

void amx_pack(const float* src, std::int64_t K, std::int64_t tiles, std::int64_t G, std::uint16_t* dst) {
  const std::int64_t KB = (K + kAmxK - 1) / kAmxK, tile_vals = 16 * 2 * kPanel;
  for (std::int64_t t = 0; t < tiles; ++t) {
    const float* col0 = src + (t / G) * K * G * kPanel + (t % G) * kPanel;
    for (std::int64_t kb = 0; kb < KB; ++kb) {
      std::uint16_t* block = dst + (t * KB + kb) * 3 * tile_vals;
      for (std::int64_t i = 0; i < kAmxK; ++i) {
        const std::int64_t k = kb * kAmxK + i;
        for (std::int64_t c = 0; c < kPanel; ++c) {
          float x = k < K ? col0[k * G * kPanel + c] : 0.0f;
          const std::int64_t at = (i / 2) * 2 * kPanel + c * 2 + i % 2;
          for (std::int64_t part = 0; part < 3; ++part) block[part * tile_vals + at] = bf16_trunc(x, &x);
        }
      }
    }
  }
}

const QmixKernels& qmix_kernels_for(Isa isa) {
#if defined(TOPOROUTE_HAVE_AMX)
  if (isa == Isa::amx) return qmix_kernels_amx();
#endif
#if defined(TOPOROUTE_HAVE_X86_SIMD)
  if (isa == Isa::avx512 || isa == Isa::amx) return qmix_kernels_avx512();
  if (isa == Isa::avx2) return qmix_kernels_avx2();
#else
  (void)isa;
#endif
  return qmix_kernels_generic();
}

}  // namespace toporoute::simd
