#pragma once
/// \file launch_pool.hpp
/// Host entry points of the pool kernels (kernels/pool.cu): mean_pool and route_indexed (with its pool= form) on
/// the GPU. Plain C++ (no CUDA types), like launch.hpp, so the bindings include it without the toolkit.
/// Semantics are python/toporoute/backends/reference.py's mean_pool and route_indexed (the oracle).
#include <cstdint>

#include "launch.hpp"
#include "toporoute/route.hpp"
#include "toporoute/status.hpp"
#include "toporoute/views.hpp"

#if defined(__CUDACC__)
#define TOPOROUTE_POOL_HD __host__ __device__
#else
#define TOPOROUTE_POOL_HD
#endif

namespace toporoute::cuda {

/// One (hidden, mask, rows) input of the pooling kernels, device memory. hidden (n, L, D) float32 with unit
/// stride along D (h_sn, h_sl: element strides, any sign); mask (n, L) bool / int32 / int64 (s0, s1); rows
/// (n,) int32 / int64 (stride in s1), absent: row i goes to output row i.
struct PoolInput {
  const float* hidden = nullptr;
  std::int64_t n = 0, L = 0, D = 0;
  std::int64_t h_sn = 0, h_sl = 0;
  IntView mask;
  IntView rows;
};

/// Where the pooled rows go: an (M, D) float32 array with unit stride along D and row stride `sm` (elements).
/// `fresh`: a new array of the call (one input, no rows, M = n): rows are written as they are computed. Otherwise
/// rows are staged and written only when no check failed (a failed call leaves the array as it was).
struct PoolTarget {
  float* out = nullptr;
  std::int64_t M = 0, D = 0, sm = 0;
  bool fresh = false;
};

/// The checks of the pool and indexed-route kernels, in the reference's order (a smaller one is reported first).
enum class PoolCheck : unsigned {
  index_range = 0,        ///< q_rows (which 0) / k_rows (which 1) entry not -1 and outside [0, M): key which*B*N + b*N + n
  rows_range = 1,         ///< a pool input's rows entry outside [0, M): key = global row position
  rows_repeat = 2,        ///< a row already written by an earlier position: key = global row position
  hidden_non_finite = 3,  ///< a counted token not finite: key = global token offset (no value)
  table_non_finite = 4,   ///< a referenced table row not finite: key (b * 2 + which) * N + n
};

/// The 64-bit error word of these kernels: the check in the top 3 bits, then the key (the smallest key is the
/// position the reference names), then, for the checks that name a value, the value (zigzag-coded) in the low
/// `value_bits` bits, or all ones there when it does not fit. atomicMin over such words keeps the reference's
/// first problem, and its own value (one value per key).
struct PoolCodes {
  static constexpr int kCheckShift = 61;
  int value_bits = 0;

  /// The layout for keys (of the checks with a value) below `key_bound`.
  static PoolCodes for_keys(std::uint64_t key_bound) {
    int bits = 0;
    while (bits < 64 && (key_bound >> bits) != 0) ++bits;
    PoolCodes c;
    c.value_bits = bits >= kCheckShift ? 0 : kCheckShift - bits;
    return c;
  }
  TOPOROUTE_POOL_HD std::uint64_t sentinel() const {
    return value_bits == 0 ? 0 : (~std::uint64_t{0} >> (64 - value_bits));
  }
  TOPOROUTE_POOL_HD std::uint64_t with_value(PoolCheck check, std::uint64_t key, std::int64_t value) const {
    const std::uint64_t zig = (static_cast<std::uint64_t>(value) << 1) ^ static_cast<std::uint64_t>(value >> 63);
    const std::uint64_t enc = zig < sentinel() ? zig : sentinel();
    return (static_cast<std::uint64_t>(check) << kCheckShift) | (key << value_bits) | enc;
  }
  TOPOROUTE_POOL_HD static std::uint64_t plain(PoolCheck check, std::uint64_t key) {
    return (static_cast<std::uint64_t>(check) << kCheckShift) | key;
  }
  static PoolCheck check_of(std::uint64_t code) { return static_cast<PoolCheck>(code >> kCheckShift); }
  static std::uint64_t payload(std::uint64_t code) { return code & ((std::uint64_t{1} << kCheckShift) - 1); }
  std::uint64_t key_of(std::uint64_t code) const { return payload(code) >> value_bits; }
  /// False when the value did not fit the word.
  bool value_of(std::uint64_t code, std::int64_t* value) const {
    const std::uint64_t enc = value_bits == 0 ? sentinel() : payload(code) & sentinel();
    if (enc == sentinel()) return false;
    *value = static_cast<std::int64_t>(enc >> 1) ^ -static_cast<std::int64_t>(enc & 1);
    return true;
  }
};

/// The PoolCodes of a call: keys of positions below max(2 B N, total pool rows).
PoolCodes pool_codes(std::int64_t B, std::int64_t N, const PoolInput* inputs, std::int64_t count);

/// Largest D the pooling kernel takes (its accumulators live in registers).
constexpr std::int64_t kPoolMaxD = 32768;

/// mean_pool of `count` inputs into `out`, device memory, asynchronous on `stream`, with the device that owns
/// the memory current. Reports PoolCheck codes (PoolCodes from pool_codes(0, 0, ...)) to `err`; scratch comes
/// from device's stream-ordered pool.
Status launch_mean_pool(int device, const PoolInput* inputs, std::int64_t count, const PoolTarget& out,
                        const ErrorSink& err, void* stream);

/// route_indexed on device memory: `args` as for the CPU's indexed route (q = k = the table, q_sn its row stride,
/// q_rows / k_rows present, M its rows), and with `count` > 0 the inputs first pooled into the table (in
/// place; `pool_out` names it as a PoolTarget). Each chunk of episodes is gathered into a scratch (B, N, D) pair
/// and routed by launch_route, so results equal launch_route's on the gathered rows bit for bit. Reports
/// PoolCheck codes (pool_codes(B, N, ...)) to `err`. Asynchronous on `stream`.
Status launch_route_indexed(int device, const RouteArgs& args, const PoolInput* pool, std::int64_t count,
                            const PoolTarget& pool_out, const RouteOut& out, const ErrorSink& err, void* stream);

/// The launchers with `device` made current (and the caller's current device restored).
Status launch_mean_pool_on(int device, const PoolInput* inputs, std::int64_t count, const PoolTarget& out,
                           const ErrorSink& err, void* stream);
Status launch_route_indexed_on(int device, const RouteArgs& args, const PoolInput* pool, std::int64_t count,
                               const PoolTarget& pool_out, const RouteOut& out, const ErrorSink& err, void* stream);

/// Host (numpy) memory, C-contiguous: the inputs are copied to `device`, the launcher runs, the results are
/// copied back. Synchronous. *code is the final error word (kNoError when every check passed). mean_pool: `out`
/// is written only when *code is kNoError. route_indexed: the pooled table is copied back when the pool checks
/// passed (as the reference writes it before checking the table's rows); `out` holds the routes.
Status mean_pool_host(const PoolInput* inputs, std::int64_t count, const PoolTarget& out, int device,
                      unsigned long long* code);
Status route_indexed_host(const RouteArgs& args, const PoolInput* pool, std::int64_t count,
                          const PoolTarget& pool_out, const RouteOut& out, int device, unsigned long long* code);

}  // namespace toporoute::cuda
