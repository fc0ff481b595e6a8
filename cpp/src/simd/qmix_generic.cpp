// Baseline qmix kernels: portable C++ compiled without ISA flags. The "register" is four floats handled by
// plain loops, which compilers turn into baseline vector code (SSE2 on x86-64, NEON on arm64).
#include <cmath>

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
  static V pow2i(V n) { return map([&](int i) { return std::ldexp(1.0f, static_cast<int>(n.v[i])); }); }
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

const QmixKernels& qmix_kernels_for(Isa isa) {
#if defined(TOPOROUTE_HAVE_X86_SIMD)
  if (isa == Isa::avx512) return qmix_kernels_avx512();
  if (isa == Isa::avx2) return qmix_kernels_avx2();
#else
  (void)isa;
#endif
  return qmix_kernels_generic();
}

}  // namespace toporoute::simd
