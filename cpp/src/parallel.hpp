#pragma once
// OpenMP helpers: a batch loop that runs serially when the work is too small to pay for waking threads, a
// first-error record that worker threads lower atomically, and per-thread scratch allocated before a parallel
// region without throwing (no exception ever crosses a thread: one escaping an OpenMP region terminates the
// process).
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>

#include "toporoute/status.hpp"

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

/// Threads of a parallel region over `items` independent items: at most one per item (1 without OpenMP).
inline int team_size(std::int64_t items) noexcept {
#if defined(TOPOROUTE_WITH_OPENMP)
  return static_cast<int>(std::clamp<std::int64_t>(items, 1, omp_get_max_threads()));
#else
  (void)items;
  return 1;
#endif
}

/// The chunk of a dynamic schedule over `items` items for `threads` threads: `most` items, or fewer when that
/// would leave fewer than 8 chunks per thread (a batch of 64 large episodes in chunks of 64 ran on one thread).
inline int chunk_size(std::int64_t items, int threads, int most) noexcept {
  return static_cast<int>(std::clamp<std::int64_t>(items / (std::int64_t{8} * threads), 1, most));
}

/// Index of the calling thread in its team (0 outside a parallel region).
inline int thread_index() noexcept {
#if defined(TOPOROUTE_WITH_OPENMP)
  return omp_get_thread_num();
#else
  return 0;
#endif
}

/// Byte offsets of a scratch block carved into pieces, each 64-byte aligned; sizes saturate at UINT64_MAX
/// instead of wrapping, so an absurd request fails to allocate rather than under-allocating.
class ScratchLayout {
 public:
  /// Reserves `count` elements of `size` bytes; returns the piece's offset.
  std::uint64_t take(std::int64_t count, std::size_t size) noexcept {
    const std::uint64_t at = bytes_;
    std::uint64_t piece = 0;
    if (count < 0 || __builtin_mul_overflow(static_cast<std::uint64_t>(count), size, &piece) ||
        __builtin_add_overflow(piece, std::uint64_t{63}, &piece) ||
        __builtin_add_overflow(bytes_, piece & ~std::uint64_t{63}, &bytes_)) {
      bytes_ = UINT64_MAX;
    }
    return at;
  }
  std::uint64_t bytes() const noexcept { return bytes_; }

 private:
  std::uint64_t bytes_ = 0;
};

/// Scratch for the threads of one call: `slots` slices of `bytes_per_slot` bytes (64-byte aligned) from one
/// non-throwing allocation made before the parallel region; the thread with thread_index() == i uses slot(i),
/// so the region must run with num_threads(slots) or fewer. A request of at most kInline bytes lives inside the
/// object: the one-episode path touches no heap.
class TeamScratch {
 public:
  static constexpr std::size_t kInline = 2048;

  TeamScratch(std::uint64_t bytes_per_slot, int slots) noexcept : slots_(slots) {
    stride_ = bytes_per_slot > UINT64_MAX - 63 ? UINT64_MAX : (bytes_per_slot + 63) & ~std::uint64_t{63};
    if (__builtin_mul_overflow(stride_, static_cast<std::uint64_t>(slots), &bytes_)) bytes_ = UINT64_MAX;
    if (bytes_ <= kInline) {
      base_ = inline_;
    } else if (bytes_ <= PTRDIFF_MAX) {
      base_ = static_cast<unsigned char*>(::operator new(bytes_, std::align_val_t{64}, std::nothrow));
      heap_ = base_ != nullptr;
    }
  }
  ~TeamScratch() {
    if (heap_) ::operator delete(base_, std::align_val_t{64});
  }
  TeamScratch(const TeamScratch&) = delete;
  TeamScratch& operator=(const TeamScratch&) = delete;

  bool ok() const noexcept { return base_ != nullptr; }
  unsigned char* slot(int i) const noexcept { return base_ + static_cast<std::size_t>(i) * stride_; }

  /// StatusCode::out_of_memory naming `op`, `what` and, for several threads, the bytes per thread.
  Status failure(const char* op, const char* what) const {
    std::string detail = what;
    if (slots_ > 1) {
      detail += " (" + std::to_string(slots_) + " threads x " +
                (stride_ == UINT64_MAX ? std::string("more than 2^64") : std::to_string(stride_)) + " bytes)";
    }
    return Status::out_of_memory(op, detail, bytes_);
  }

 private:
  alignas(64) unsigned char inline_[kInline];
  unsigned char* base_ = nullptr;
  bool heap_ = false;
  int slots_ = 1;
  std::uint64_t stride_ = 0;
  std::uint64_t bytes_ = 0;
};

}  // namespace toporoute::detail
