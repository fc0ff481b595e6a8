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

/// The float32 pass of route() for large teams (cosine_kernels.inl): the approximate cosine of every (k_j, q_i)
/// pair, v = (k_j . q_i) * k_scale[j] * q_scale[i], the dot product summed in 16 float32 lanes by fused
/// multiply-adds over pieces of kPieceColumns columns, the pieces and the scaling in float64 (the same value at
/// every level that has this pass). Writes scores[j * N + i] = v clamped to [-1, 1] in float32, and lists by
/// recipient the providers with v > low, in ascending j: count[i] of them, j in cand[i * N + c] and v in
/// value[i * N + c]. sums: working space of N * kCosineTile doubles.
struct CosineArgs {
  const float* k;
  std::int64_t k_sn;
  const double* k_scale;
  const float* q;
  std::int64_t q_sn;
  const double* q_scale;
  std::int64_t N;
  std::int64_t D;
  double low;
  float* scores;
  std::int32_t* cand;
  double* value;
  std::int64_t* count;
  double* sums;
};

/// The most q rows of one tile of the float32 pass (a multiple of every level's block).
constexpr std::int64_t kCosineTile = 64;

/// Columns of one float32 piece (bounds the float32 error: see route.cpp): 32 products per lane.
constexpr std::int64_t kPieceColumns = 512;

/// The route kernels of one SIMD level: the float64 gram; float64 dot products of count rows k[r] with one row q
/// (out[r]), each equal to the gram's entry for the same rows; float64 squared norms equal to the gram's; the
/// float32 pass (null where the level has none).
struct RouteKernels {
  GramFn gram;
  void (*dots)(const float* const* k, std::int64_t count, const float* q, std::int64_t D, double* out);
  void (*norms)(const float* rows, std::int64_t sn, std::int64_t N, std::int64_t D, double* out);
  void (*cosine)(const CosineArgs&);
};

void gram_generic(const GramArgs& a);
#if defined(TOPOROUTE_HAVE_X86_SIMD)
void gram_avx2(const GramArgs& a);
void gram_avx512(const GramArgs& a);
extern const RouteKernels kRouteAvx2;
extern const RouteKernels kRouteAvx512;
#endif
extern const RouteKernels kRouteGeneric;

/// The kernel for an ISA the dispatcher has validated.
GramFn gram_for(Isa isa);
/// The route kernels for an ISA the dispatcher has validated.
const RouteKernels& route_kernels_for(Isa isa);

}  // namespace toporoute::simd
