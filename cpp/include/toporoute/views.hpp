#pragma once
/// \file views.hpp
/// Plain views over caller-owned memory, shared by the CPU and CUDA implementations.
/// Conventions: graphs are `adj[b, src, dst]` (row = sender, column = receiver); strides are in elements,
/// not bytes; boolean arrays are one byte per element holding 0 or 1. Output arrays are C-contiguous.
#include <cstdint>

namespace toporoute {

/// Element type of an integer view: bool (one byte, 0 or 1), int32 or int64.
enum class IntType : int { u8 = 0, i32 = 1, i64 = 2 };

/// Read-only view of a 1-D or 2-D integer array of any strides (elements); 1-D arrays use `s1` only.
/// Absent when `data` is null.
struct IntView {
  const void* data = nullptr;
  IntType type = IntType::i64;
  std::int64_t s0 = 0, s1 = 0;

  bool present() const noexcept { return data != nullptr; }
  std::int64_t at(std::int64_t i, std::int64_t j) const noexcept {
    const std::int64_t off = i * s0 + j * s1;
    switch (type) {
      case IntType::u8:
        return static_cast<const std::uint8_t*>(data)[off];
      case IntType::i32:
        return static_cast<const std::int32_t*>(data)[off];
      case IntType::i64:
        break;
    }
    return static_cast<const std::int64_t*>(data)[off];
  }
};

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

/// One input of mean_pool(): hidden (n, L, D) float32 with unit stride along D, mask (n, L) bool / int32 /
/// int64 (non-zero = token counted), and optional rows (n,) int32 / int64: the output row of each input row
/// (absent: row i goes to output row i).
struct PoolArgs {
  const float* hidden = nullptr;
  std::int64_t n = 0, L = 0, D = 0;
  std::int64_t h_sn = 0, h_sl = 0;  ///< element strides of hidden along n and L
  IntView mask;
  IntView rows;  ///< 1-D: stride in s1
};

/// Output of mean_pool(): a C-contiguous (M, D) float32 array. `fresh`: the caller allocated it for this call
/// and discards it on error, so rows may be written as they are computed (no staging buffer).
struct PoolOut {
  float* out = nullptr;
  std::int64_t M = 0, D = 0;
  bool fresh = false;
  /// When set (e.g. "pool"), errors name this argument and the input's position: "pool[1] hidden ...".
  const char* group = nullptr;
};

/// Inputs of toposort(). adj: (B, N, N) u8; weights: (B, N, N) f32 >= 0 or null; active: (B, N) or null.
struct ToposortArgs {
  const std::uint8_t* adj = nullptr;
  const float* weights = nullptr;
  const std::uint8_t* active = nullptr;
  std::int64_t B = 0, N = 0;
  std::int64_t adj_sb = 0, adj_sr = 0, adj_sc = 0;
  std::int64_t w_sb = 0, w_sr = 0, w_sc = 0;
  std::int64_t a_sb = 0, a_sn = 0;
};

/// Outputs of toposort(), C-contiguous: order (B,N) i32, level (B,N) i32, removed (B,N,N) u8, is_dag (B) u8.
struct ToposortOut {
  std::int32_t* order = nullptr;
  std::int32_t* level = nullptr;
  std::uint8_t* removed = nullptr;
  std::uint8_t* is_dag = nullptr;
};

/// Inputs of graph_stats(): adj and optional prev (B,N,N) u8, optional active (B,N).
struct GraphStatsArgs {
  const std::uint8_t* adj = nullptr;
  const std::uint8_t* prev = nullptr;
  const std::uint8_t* active = nullptr;
  std::int64_t B = 0, N = 0;
  std::int64_t adj_sb = 0, adj_sr = 0, adj_sc = 0;
  std::int64_t p_sb = 0, p_sr = 0, p_sc = 0;
  std::int64_t a_sb = 0, a_sn = 0;
};

/// Outputs of graph_stats(), C-contiguous: edges (B) i64, density (B) f64, in/out_degree (B,N) i32,
/// reciprocity (B) f64, jaccard (B) f64 (written only when prev is given).
struct GraphStatsOut {
  std::int64_t* edges = nullptr;
  double* density = nullptr;
  std::int32_t* in_degree = nullptr;
  std::int32_t* out_degree = nullptr;
  double* reciprocity = nullptr;
  double* jaccard = nullptr;
};

/// Elementwise AgentConductor density (methods/agentconductor.md §4). All arrays length n, contiguous.
struct DensityArgs {
  const std::int64_t* nodes = nullptr;
  const std::int64_t* edges = nullptr;
  const std::int64_t* steps = nullptr;
  const std::int64_t* n_max = nullptr;
  std::int64_t n = 0;
};

struct DensityOut {
  double* s_node = nullptr;
  double* s_edge = nullptr;
  double* s_depth = nullptr;
  double* s_complex = nullptr;
  double* reward = nullptr;
};

}  // namespace toporoute
