#pragma once
// OpenMP helpers: a batch loop that runs serially when the work is too small to pay for waking threads, and
// a first-error record that worker threads lower atomically (no exception ever crosses a thread).
#include <atomic>
#include <cstdint>

#if defined(TOPOROUTE_WITH_OPENMP)
#include <omp.h>
#endif

namespace toporoute::detail {

/// Below this many scalar operations a batch runs on the calling thread.
constexpr std::int64_t kParallelWork = std::int64_t{1} << 17;

/// Lowest failing episode seen by any thread (B when none).
class FirstError {
 public:
  explicit FirstError(std::int64_t none) : none_(none), value_(none) {}
  void record(std::int64_t b) noexcept {
    std::int64_t cur = value_.load(std::memory_order_relaxed);
    while (b < cur && !value_.compare_exchange_weak(cur, b, std::memory_order_relaxed)) {
    }
  }
  bool any() const noexcept { return value_.load() != none_; }
  std::int64_t get() const noexcept { return value_.load(); }

 private:
  std::int64_t none_;
  std::atomic<std::int64_t> value_;
};

}  // namespace toporoute::detail
