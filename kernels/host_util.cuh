#pragma once
/// \file host_util.cuh
/// Private host-side helpers of the .cu files: the current-device scope, the device arena and the chunked
/// host <-> device transfer behind every synchronous numpy entry point.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "cuda_check.cuh"
#include "toporoute/status.hpp"

namespace toporoute::cuda::detail {

// Bounds the device memory of the host-memory entry points (they stream the batch through in chunks).
constexpr std::size_t kChunkBytes = std::size_t{512} << 20;

inline Status invalid(const std::string& arg, const std::string& message) {
  return Status::error(StatusCode::invalid_argument, arg, message);
}

// Makes a device current for the calling thread and restores the previous one on scope exit.
class DeviceScope {
 public:
  DeviceScope() = default;
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope() {
    if (restore_) cudaSetDevice(previous_);
  }

  Status enter(int device) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      cudaGetLastError();
      std::string msg = "no CUDA device is available";
      if (e != cudaSuccess) msg += std::string(" (") + cudaGetErrorString(e) + ")";
      return Status::error(StatusCode::unsupported, "", msg);
    }
    if (device < 0 || device >= count) {
      return invalid("device", "device must be in [0, " + std::to_string(count) + "); got " + std::to_string(device));
    }
    if (cudaGetDevice(&previous_) == cudaSuccess) {
      restore_ = previous_ != device;
    } else {
      cudaGetLastError();
    }
    return status_from_cuda(cudaSetDevice(device), "cudaSetDevice");
  }

  /// enter() for a device already known to exist (a device array's): no device count, no switch when current.
  Status enter_fast(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      return enter(device);
    }
    if (previous_ == device) return Status::success();
    restore_ = true;
    return status_from_cuda(cudaSetDevice(device), "cudaSetDevice");
  }

 private:
  int previous_ = 0;
  bool restore_ = false;
};

// One device allocation carved into 256-byte aligned pieces; freed on scope exit.
class DeviceArena {
 public:
  DeviceArena() = default;
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  ~DeviceArena() {
    if (base_ != nullptr) cudaFree(base_);
  }

  /// Reserves `bytes` (before allocate()); returns the piece's offset.
  std::size_t reserve(std::size_t bytes) {
    const std::size_t offset = size_;
    size_ += (bytes + 255) / 256 * 256;
    return offset;
  }
  Status allocate(const char* op, const char* what) {
    if (size_ == 0) return Status::success();
    return detail::device_malloc(&base_, size_, op, what);
  }
  template <typename T>
  T* at(std::size_t offset) const {
    return static_cast<T*>(static_cast<void*>(static_cast<char*>(base_) + offset));
  }

 private:
  void* base_ = nullptr;
  std::size_t size_ = 0;
};

// True when an array with these (extent, element stride) axes is C-contiguous; axes of extent 1 and empty
// arrays impose nothing.
inline bool c_contiguous(std::initializer_list<std::pair<std::int64_t, std::int64_t>> axes) {
  std::int64_t expected = 1;
  for (const auto& ax : axes) {
    if (ax.first == 0) return true;
  }
  for (auto it = std::rbegin(axes); it != std::rend(axes); ++it) {
    if (it->first > 1 && it->second != expected) return false;
    expected *= it->first;
  }
  return true;
}

// invalid_argument "<name> must be C-contiguous" unless the array with these (extent, element stride) axes is
// C-contiguous (c_contiguous); an optional array that is not `present` passes.
inline Status require_c_contiguous(const char* name, std::initializer_list<std::pair<std::int64_t, std::int64_t>> axes,
                                   bool present = true) {
  if (!present || c_contiguous(axes)) return Status::success();
  return invalid(name, std::string(name) + " must be C-contiguous");
}

// The host entries' layout checks of a batch of graphs (toposort, graph_stats: fields B, N, adj, active and their
// strides), in order: B, N >= 0 (named `op`), adj (B,N,N), the op's optional (B,N,N) array `extra` and active
// (B,N) C-contiguous.
template <class Args>
Status check_graph_layout(const Args& a, const char* op, const char* extra_name, const void* extra, std::int64_t e_sb,
                          std::int64_t e_sr, std::int64_t e_sc) {
  const std::int64_t B = a.B, N = a.N;
  if (B < 0 || N < 0) return invalid("adj", std::string(op) + ": B and N must be >= 0");
  TOPOROUTE_RETURN_IF_ERROR(require_c_contiguous("adj", {{B, a.adj_sb}, {N, a.adj_sr}, {N, a.adj_sc}}));
  TOPOROUTE_RETURN_IF_ERROR(require_c_contiguous(extra_name, {{B, e_sb}, {N, e_sr}, {N, e_sc}}, extra != nullptr));
  return require_c_contiguous("active", {{B, a.a_sb}, {N, a.a_sn}}, a.active != nullptr);
}

// A batch of B episodes streamed between C-contiguous host arrays and one device buffer, `chunk` episodes per
// trip (about kChunkBytes of rows, at least one episode), the one copy loop behind every host-memory entry
// point. Each array is a run of fixed-size per-episode rows: inputs are copied in before each chunk's launch,
// outputs copied back after it, on one stream. An optional error word (a device uint64 the kernels lower) is
// reset to all ones before each launch and read back after it.
class ChunkedTransfer {
 public:
  /// Declares an input of `row` bytes per episode (absent, with a null device pointer, when `host` is null or
  /// `row` is 0); returns its id.
  int input(const void* host, std::size_t row) { return add(host, nullptr, row); }
  /// Declares an output of `row` bytes per episode; returns its id.
  int output(void* host, std::size_t row) { return add(nullptr, host, row); }
  /// Declares the error word; returns its id.
  int error_word() {
    err_ = add(nullptr, nullptr, 0);
    arrays_[static_cast<std::size_t>(err_)].fixed = sizeof(unsigned long long);
    return err_;
  }

  /// Picks the chunk for B > 0 episodes and allocates the device buffer on the current device (out of memory
  /// names `op`).
  Status allocate(const char* op, std::int64_t B) {
    std::size_t per_episode = 0;
    for (const Array& a : arrays_) per_episode += a.row;
    const auto fit = static_cast<std::int64_t>(kChunkBytes / std::max<std::size_t>(per_episode, 1));
    chunk_ = std::clamp<std::int64_t>(fit, 1, B);
    for (Array& a : arrays_) a.at = arena_.reserve(static_cast<std::size_t>(chunk_) * a.row + a.fixed);
    return arena_.allocate(op, "the chunk buffer of the inputs and outputs");
  }

  /// Device memory of array `id` (null when absent); valid after allocate().
  template <typename T>
  T* device(int id) const {
    const Array& a = arrays_[static_cast<std::size_t>(id)];
    return a.row == 0 && a.fixed == 0 ? nullptr : arena_.at<T>(a.at);
  }

  /// For every chunk [b0, b0 + count) of B episodes: copies the inputs in, calls launch(b0, count) to enqueue
  /// the kernels on `st`, copies the outputs back. With an error word, the stream is synchronised after each
  /// chunk and check(b0, count, word) may end the run with a non-ok Status; without one, it is synchronised
  /// once at the end (`kernel` names the work in a CUDA error).
  template <class Launch, class Check>
  Status run(std::int64_t B, cudaStream_t st, const char* kernel, Launch launch, Check check) {
    for (std::int64_t b0 = 0; b0 < B; b0 += chunk_) {
      const std::int64_t count = std::min(chunk_, B - b0);
      const auto first = static_cast<std::size_t>(b0), n = static_cast<std::size_t>(count);
      for (const Array& a : arrays_) {
        if (a.in == nullptr || a.row == 0) continue;
        TOPOROUTE_RETURN_IF_ERROR(status_from_cuda(
            cudaMemcpyAsync(arena_.at<void>(a.at), a.in + first * a.row, n * a.row, cudaMemcpyHostToDevice, st),
            "cudaMemcpyAsync"));
      }
      if (err_ >= 0) {
        TOPOROUTE_RETURN_IF_ERROR(status_from_cuda(
            cudaMemsetAsync(device<void>(err_), 0xff, sizeof(unsigned long long), st), "cudaMemsetAsync"));
      }
      TOPOROUTE_RETURN_IF_ERROR(launch(b0, count));
      for (const Array& a : arrays_) {
        if (a.out == nullptr || a.row == 0) continue;
        TOPOROUTE_RETURN_IF_ERROR(status_from_cuda(
            cudaMemcpyAsync(a.out + first * a.row, arena_.at<void>(a.at), n * a.row, cudaMemcpyDeviceToHost, st),
            "cudaMemcpyAsync"));
      }
      if (err_ < 0) continue;
      unsigned long long word = 0;
      TOPOROUTE_RETURN_IF_ERROR(status_from_cuda(
          cudaMemcpyAsync(&word, device<void>(err_), sizeof(word), cudaMemcpyDeviceToHost, st), "cudaMemcpyAsync"));
      TOPOROUTE_RETURN_IF_ERROR(status_from_cuda(cudaStreamSynchronize(st), kernel));
      TOPOROUTE_RETURN_IF_ERROR(check(b0, count, word));
    }
    return err_ >= 0 ? Status::success() : status_from_cuda(cudaStreamSynchronize(st), kernel);
  }

 private:
  struct Array {
    const char* in = nullptr;
    char* out = nullptr;
    std::size_t row = 0, fixed = 0, at = 0;
  };
  int add(const void* in, void* out, std::size_t row) {
    Array a;
    a.in = static_cast<const char*>(in);
    a.out = static_cast<char*>(out);
    a.row = in == nullptr && out == nullptr ? 0 : row;
    arrays_.push_back(a);
    return static_cast<int>(arrays_.size()) - 1;
  }

  std::vector<Array> arrays_;
  DeviceArena arena_;
  std::int64_t chunk_ = 1;
  int err_ = -1;
};

}  // namespace toporoute::cuda::detail
