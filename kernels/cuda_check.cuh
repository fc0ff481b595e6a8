#pragma once
/// \file cuda_check.cuh
/// Private helpers shared by the .cu files: CUDA error -> Status conversion and warp-level reductions.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "launch.hpp"
#include "toporoute/status.hpp"

namespace toporoute::cuda::detail {

constexpr unsigned kFullMask = 0xffffffffu;
/// Largest grid.x we launch; kernels loop over the batch beyond it.
constexpr std::int64_t kMaxGrid = 2147483647;

/// Ok for cudaSuccess; otherwise, with the runtime's own text: StatusCode::unsupported for "this machine or
/// build cannot run it" errors, StatusCode::out_of_memory when device memory ran out (OutOfMemoryError, like
/// host memory: the remedy is the same smaller batch) and StatusCode::device for every other CUDA failure.
inline Status status_from_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::success();
  const bool unsupported = e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
                           e == cudaErrorNoKernelImageForDevice || e == cudaErrorUnsupportedPtxVersion;
  std::string msg = std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e) + " (" +
                    cudaGetErrorName(e) + ")";
  if (e == cudaErrorNoKernelImageForDevice) {
    msg += "; toporoute's kernels were not compiled for this GPU's architecture (rebuild with "
           "TOPOROUTE_CUDA_ARCHS including it)";
  }
  const StatusCode code = unsupported                        ? StatusCode::unsupported
                          : e == cudaErrorMemoryAllocation ? StatusCode::out_of_memory
                                                           : StatusCode::device;
  return Status::error(code, "", msg);
}

/// cudaMalloc of `bytes` on the current device; out of memory names `op`, `what` and the bytes.
inline Status device_malloc(void** ptr, std::size_t bytes, const char* op, const char* what) {
  const cudaError_t e = cudaMalloc(ptr, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky, but leave no trace for the next launch_status
    int device = 0;
    cudaGetDevice(&device);
    return Status::out_of_memory(op, std::string(what) + " in device memory of cuda:" + std::to_string(device),
                                 bytes);
  }
  return status_from_cuda(e, "cudaMalloc");
}

/// Status of the last kernel launch on this host thread (reads and resets the runtime's last error).
inline Status launch_status(const char* kernel) { return status_from_cuda(cudaGetLastError(), kernel); }

#ifdef __CUDACC__
/// Lowers the sink's word to `code` (any thread, any number of times; nothing without a word).
__device__ __forceinline__ void report(const ErrorSink& s, unsigned long long code) {
  if (s.word != nullptr) atomicMin(s.word, code);
}

/// The end of every kernel that takes an ErrorSink: must be reached by every thread of every block, once, after
/// the block's last write (no early return before it). The last block to arrive publishes the word to the
/// host (see ErrorSink); without a host pair it does nothing.
__device__ __forceinline__ void finish(const ErrorSink& s) {
  if (s.host == nullptr) return;
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    __threadfence();
    const unsigned total = gridDim.x * gridDim.y * gridDim.z;
    if (atomicAdd(s.blocks, 1u) == total - 1) {
      __threadfence();
      const unsigned long long code = atomicExch(s.word, kNoError);
      atomicExch(s.blocks, 0u);
      volatile unsigned long long* h = s.host;
      h[0] = code;
      __threadfence_system();
      h[1] = s.seq;
    }
  }
}

// All reductions below must be reached by all 32 lanes of the warp (full mask).
__device__ __forceinline__ unsigned warp_min(unsigned x) {
  for (int o = 16; o > 0; o >>= 1) x = min(x, __shfl_xor_sync(kFullMask, x, o));
  return x;
}
__device__ __forceinline__ unsigned long long warp_min(unsigned long long x) {
  for (int o = 16; o > 0; o >>= 1) x = min(x, __shfl_xor_sync(kFullMask, x, o));
  return x;
}
__device__ __forceinline__ int warp_max(int x) {
  for (int o = 16; o > 0; o >>= 1) x = max(x, __shfl_xor_sync(kFullMask, x, o));
  return x;
}
__device__ __forceinline__ int warp_sum(int x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(kFullMask, x, o);
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(kFullMask, x, o);
  return x;
}
#endif

}  // namespace toporoute::cuda::detail
