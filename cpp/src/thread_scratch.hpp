#pragma once
// Per-thread scratch of the batch kernels: 64-byte aligned bytes, grown on demand and kept for the life of
// the thread (never shrunk), allocated without throwing (null when the allocation fails).
//
// Internal linkage on purpose: units compiled with different ISA flags (qmix.cpp, simd/qmix_amx.cpp) each get
// their own copy, so the linker can never pick one unit's AVX-512 code for another's.
#include <cstddef>
#include <new>

namespace toporoute::detail {
namespace {

class ThreadScratch {
 public:
  ThreadScratch() = default;
  ThreadScratch(const ThreadScratch&) = delete;
  ThreadScratch& operator=(const ThreadScratch&) = delete;
  ~ThreadScratch() { release(); }

  /// At least `bytes` bytes, 64-byte aligned; null when the allocation fails.
  void* get(std::size_t bytes) {
    if (bytes > capacity_) {
      release();
      data_ = ::operator new(bytes, std::align_val_t{64}, std::nothrow);
      capacity_ = data_ != nullptr ? bytes : 0;
    }
    return data_;
  }

 private:
  void release() {
    if (data_ != nullptr) ::operator delete(data_, std::align_val_t{64});
    data_ = nullptr;
    capacity_ = 0;
  }
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace
}  // namespace toporoute::detail
