// Baseline kernel: portable C++, compiled without ISA flags. Four partial sums break the add dependency
// chain; the order is fixed, so results are deterministic.
#include "simd/gram.hpp"

namespace toporoute::simd {
namespace {

double dot(const float* a, const float* b, std::int64_t D) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  std::int64_t c = 0;
  for (; c + 4 <= D; c += 4) {
    s0 += static_cast<double>(a[c]) * b[c];
    s1 += static_cast<double>(a[c + 1]) * b[c + 1];
    s2 += static_cast<double>(a[c + 2]) * b[c + 2];
    s3 += static_cast<double>(a[c + 3]) * b[c + 3];
  }
  for (; c < D; ++c) s0 += static_cast<double>(a[c]) * b[c];
  return (s0 + s1) + (s2 + s3);
}

}  // namespace

void gram_generic(const GramArgs& a) {
  for (std::int64_t j = 0; j < a.N; ++j) {
    const float* kj = a.k + j * a.k_sn;
    a.kss[j] = dot(kj, kj, a.D);
    for (std::int64_t i = 0; i < a.N; ++i) a.dots[j * a.N + i] = dot(kj, a.q + i * a.q_sn, a.D);
  }
  for (std::int64_t i = 0; i < a.N; ++i) {
    const float* qi = a.q + i * a.q_sn;
    a.qss[i] = dot(qi, qi, a.D);
  }
}

GramFn gram_for(Isa isa) {
#if defined(TOPOROUTE_HAVE_X86_SIMD)
  if (isa == Isa::avx512 || isa == Isa::amx) return gram_avx512;
  if (isa == Isa::avx2) return gram_avx2;
#else
  (void)isa;
#endif
  return gram_generic;
}

}  // namespace toporoute::simd
