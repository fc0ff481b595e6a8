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

/// A batch of graphs, adj (B, N, N) u8 (adj[b, src, dst]) and alive (B, N) u8 marking the nodes that exist,
/// strides in elements: what the DAG and team ops read.
struct GraphBatch {
  const std::uint8_t* adj = nullptr;
  const std::uint8_t* alive = nullptr;
  std::int64_t B = 0, N = 0;
  std::int64_t adj_sb = 0, adj_sr = 0, adj_sc = 0;
  std::int64_t a_sb = 0, a_sn = 0;
};

}  // namespace toporoute
