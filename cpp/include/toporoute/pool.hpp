#pragma once
/// \file pool.hpp
/// Masked mean pooling of token states into embedding rows (cpp/src/pool.cpp).
/// Semantics are defined by python/toporoute/backends/reference.py; the CPU implementation validates its views,
/// runs OpenMP across the batch, never throws and reports the first problem (lowest episode index) as a Status.
/// Views follow toporoute/views.hpp's conventions.
#include <cstdint>

#include "toporoute/status.hpp"
#include "toporoute/views.hpp"

namespace toporoute {

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

/// Masked mean pooling + L2 normalisation of `count` inputs into one table (sentence-transformers semantics):
/// output row rows[i] of input b = v / max(|v|_2, 1e-12) with v = (sum of hidden[i, l] over tokens with
/// mask != 0) / max(tokens, 1e-9), all in float64, rounded to float32 once (a row without tokens is zero).
/// Every row index (in [0, M), distinct across all inputs) and every counted token (finite) is checked before
/// anything is written unless out.fresh, so a failed call leaves the table as it was. OpenMP over rows;
/// cost O(sum n L D), plus an (sum n) x D float32 staging buffer when not out.fresh.
Status mean_pool(const PoolArgs* inputs, std::int64_t count, const PoolOut& out);

}  // namespace toporoute
