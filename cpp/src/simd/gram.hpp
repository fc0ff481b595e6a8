#pragma once
// Per-ISA kernels for the heavy part of route(): row sums of squares and the N x N dot products of one
// episode, accumulated in float64. One driver (gram_kernels.inl) over each ISA's vector traits; each ISA's
// instantiation lives in its own translation unit compiled with its own flags and must only be called after the
// dispatcher checked the CPU. Everything in those units has internal linkage except the entry point, so no
// inline function compiled for a wider ISA can leak into shared code.
#include <cstdint>

#include "toporoute/dispatch.hpp"

namespace toporoute::simd {

/// One episode. k, q: N rows of D floats, row strides k_sn / q_sn (elements), unit stride along D.
/// Writes dots[j * N + i] = k_j . q_i, kss[j] = |k_j|^2, qss[i] = |q_i|^2.
struct GramArgs {
  const float* k;
  std::int64_t k_sn;
  const float* q;
  std::int64_t q_sn;
  std::int64_t N;
  std::int64_t D;
  double* dots;
  double* kss;
  double* qss;
};

using GramFn = void (*)(const GramArgs&);

void gram_generic(const GramArgs& a);
#if defined(TOPOROUTE_HAVE_X86_SIMD)
void gram_avx2(const GramArgs& a);
void gram_avx512(const GramArgs& a);
#endif

/// The kernel for an ISA the dispatcher has validated.
GramFn gram_for(Isa isa);

}  // namespace toporoute::simd
