// AVX-512 qmix kernels (compiled with -mavx512f -mavx512dq -mavx512vl): a panel is one 16-float register.
// Linear blocks of 6 rows x 4 panels (24 accumulators + 4 weight registers; broadcasts fold into a load), GRU
// passes of 8 rows x 3 gates (24 accumulators + 3 weight registers of the 32). Measured on a Sapphire Rapids
// core: both reach about 80 GMAC/s, against about 94 for an 8 x 3 block whose data never leaves L1.
// GCC 12 flags its own _mm512_max_ps, _mm512_roundscale_ps, ... (an intentionally undefined register in
// avx512fintrin.h) as (maybe-)uninitialized once inlined; the warnings are about the header, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "simd/qmix_kernels.hpp"

#include "simd/qmix_avx512_traits.hpp"

#include "simd/qmix_kernels.inl"

namespace toporoute::simd {

const QmixKernels& qmix_kernels_avx512() {
  static constexpr QmixKernels kernels = kernel_table<Avx512>();
  return kernels;
}

}  // namespace toporoute::simd
