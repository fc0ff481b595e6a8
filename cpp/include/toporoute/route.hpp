#pragma once
/// \file route.hpp
/// DyTopo routing: cosine match of needs (q) and offers (k), threshold and in-degree cap, on the CPU
/// (cpp/src/route.cpp) and the GPU (kernels/route.cu).
/// Semantics are defined by python/toporoute/backends/reference.py; the CPU implementation validates its views,
/// runs OpenMP across the batch, never throws and reports the first problem (lowest episode index) as a Status.
/// Views follow toporoute/views.hpp's conventions.
#include <cstdint>

#include "toporoute/dispatch.hpp"
#include "toporoute/status.hpp"
#include "toporoute/views.hpp"

namespace toporoute {

/// Inputs of route(). q, k: (B, N, D) float32 with unit stride along D. active: (B, N) or null (all active).
struct RouteArgs {
  const float* q = nullptr;
  const float* k = nullptr;
  const std::uint8_t* active = nullptr;
  std::int64_t B = 0, N = 0, D = 0;
  std::int64_t q_sb = 0, q_sn = 0;  ///< element strides of q along B and N
  std::int64_t k_sb = 0, k_sn = 0;
  std::int64_t a_sb = 0, a_sn = 0;
  float tau = 0.3f;      ///< edge iff float32 score > tau (strict)
  std::int64_t k_in = 3; ///< <= 0: no cap
  std::int64_t K = 3;    ///< inbox width: k_in if k_in > 0 else max(N - 1, 0)
  /// Indexed routing (both present or both absent): q and k then point at one (M, D) embedding table
  /// (q_sn = k_sn = its row stride, q_sb = k_sb = 0), and agent n of episode b needs row q_rows.at(b, n)
  /// and offers row k_rows.at(b, n) (int32 or int64, (B, N), any strides). -1 marks an inactive agent (its
  /// rows read as zeros); any other value must lie in [0, M).
  IntView q_rows, k_rows;
  std::int64_t M = 0;
};

/// Outputs of route(), all C-contiguous: scores (B,N,N) f32, adjacency (B,N,N) u8, inbox (B,N,K) i32,
/// in_degree (B,N) i32.
struct RouteOut {
  float* scores = nullptr;
  std::uint8_t* adjacency = nullptr;
  std::int32_t* inbox = nullptr;
  std::int32_t* in_degree = nullptr;
};

/// Cosine routing, one fused pass per episode: row norms and the N x N dot products in float64 (SIMD kernel
/// of `isa`), score = clamp(dot / (|k_j| |q_i|), -1, 1) rounded to float32 (0 for zero or inactive rows),
/// candidate edge j -> i iff score > tau, j != i, both active and non-zero; each recipient keeps its k_in best
/// providers (ties to the lower index). Cost O(B N^2 D). Non-finite input gives StatusCode::non_finite.
/// Teams of 16 agents and more with rows of 128 columns and more (at a level with FMA) take a float32 pass first
/// and compute in float64 only the pairs its error bound leaves open: the same decisions, the other scores within
/// that bound (route.cpp).
/// With args.q_rows / k_rows (indexed routing) each episode's rows are first gathered from the table into
/// per-thread scratch (zero rows for -1) and go through the same kernel, so the result equals route() over
/// the gathered (B, N, D) arrays bit for bit, with agents whose q_rows or k_rows is -1 inactive. Indices are
/// checked (check_route) before any row is read; a non-finite referenced row is reported on "table".
Status route(const RouteArgs& args, const RouteOut& out, Isa isa);

/// Everything route() checks before reading any float: dimensions, tau in [-1, 1], k_in >= 0, the inbox width
/// and, when indexed, every q_rows then k_rows entry -1 or in [0, M) (the first bad entry in C order is
/// reported as out_of_range). O(B N) when indexed, else O(1).
Status check_route(const RouteArgs& args);

/// A strided 2-D host array: element (i, j) at data[i * s0 + j * s1].
template <typename T>
struct Strided2 {
  const T* data = nullptr;
  std::int64_t s0 = 0, s1 = 0;  ///< element strides
  const T* row(std::int64_t i) const noexcept { return data + i * s0; }
};

/// Inputs of nearest(): table (M, D) f32, queries (B, D) f32, keep (B, M) u8 (data null: every row kept); any
/// element strides.
struct NearestArgs {
  Strided2<float> table, queries;
  Strided2<std::uint8_t> keep;
  std::int64_t B = 0, M = 0, D = 0;
  std::int64_t k = 1;  ///< rows per query, >= 1
};

/// The k rows of the table nearest each query (backends/reference.py's nearest): score = clamp(dot / (|q_b|
/// |t_m|), -1, 1) with the dot products and norms in float64, rounded to float32 (0 when either row is zero);
/// each query's kept rows ranked by descending score, ties to the lower row, the first k written to out (B, k)
/// i64 C-contiguous, -1 padding the rest. Checks, in order: k >= 1; every table row finite (the first bad row
/// is reported), then every query (the first bad query). O(M D + B M D + B M log k); OpenMP over the queries.
Status nearest(const NearestArgs& args, std::int64_t* out);

}  // namespace toporoute
