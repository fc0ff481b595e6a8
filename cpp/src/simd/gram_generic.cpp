// Baseline gram kernel: portable C++, compiled without ISA flags. Four float64 lanes per dot product break the
// add dependency chain; the reduction order is fixed, so results are deterministic.
#include <cstdint>

namespace toporoute::simd {
namespace {

/// Plain-array lanes for the gram driver: W lanes, kRows x kCols blocks. The build uses GenericLanes<4, 1, 4>;
/// the unit tests (cpp/tests/test_gram.cpp) run the driver over other widths and blocks too.
template <int W_, int R_, int C_>
struct GenericLanes {
  struct V {
    double v[W_];
  };
  using Mask = std::int64_t;  // the number of leading lanes loaded
  static constexpr int W = W_, kRows = R_, kCols = C_;

  static Mask all() { return W; }
  static Mask first(std::int64_t n) { return n; }
  template <bool Tail>
  static V load(const float* p, Mask m) {
    V out;
    for (int i = 0; i < W; ++i) out.v[i] = (!Tail || i < m) ? static_cast<double>(p[i]) : 0.0;
    return out;
  }
  static V zero() { return V{}; }
  static V fma(V a, V b, V c) {
    for (int i = 0; i < W; ++i) c.v[i] += a.v[i] * b.v[i];
    return c;
  }
  // pairwise: ((l0 + l1) + (l2 + l3)) for four lanes
  static double hsum(V a) {
    for (int width = W; width > 1; width = (width + 1) / 2) {
      const int half = width / 2;
      for (int i = 0; i < half; ++i) a.v[i] = a.v[2 * i] + a.v[2 * i + 1];
      if (width % 2 != 0) a.v[half] = a.v[width - 1];
    }
    return a.v[0];
  }
};

}  // namespace
}  // namespace toporoute::simd

#include "gram_kernels.inl"

namespace toporoute::simd {

void gram_generic(const GramArgs& a) { gram_driver<GenericLanes<4, 1, 4>>(a); }

// No float32 cosine pass at this level: without hardware FMA its fused multiply-adds would be library calls.
const RouteKernels kRouteGeneric = {gram_generic, dots_driver<GenericLanes<4, 1, 4>>,
                                    norms_driver<GenericLanes<4, 1, 4>>, nullptr};

const RouteKernels& route_kernels_for(Isa isa) {
#if defined(TOPOROUTE_HAVE_X86_SIMD)
  if (isa == Isa::avx512 || isa == Isa::amx) return kRouteAvx512;
  if (isa == Isa::avx2) return kRouteAvx2;
#else
  (void)isa;
#endif
  return kRouteGeneric;
}

GramFn gram_for(Isa isa) { return route_kernels_for(isa).gram; }

}  // namespace toporoute::simd
