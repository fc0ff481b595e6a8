#pragma once
/// \file launch.hpp
/// Host entry points of the CUDA kernels. This header is plain C++ (no CUDA types) so the pybind11 layer can
/// include it without the CUDA toolkit; streams are passed as opaque pointers (cudaStream_t).
/// Semantics are identical to the CPU ops of toporoute/route.hpp, toposort.hpp and qmix.hpp (the reference backend
/// is the oracle).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "toporoute/qmix.hpp"
#include "toporoute/status.hpp"
#include "toporoute/route.hpp"
#include "toporoute/toposort.hpp"

namespace toporoute::cuda {

/// The word before any bad input is seen (also the "no error" value read back).
constexpr unsigned long long kNoError = ~0ull;

/// Where a kernel reports bad input (a non-finite row, a negative weight) without a host synchronisation.
/// Threads lower `word` (a device uint64 holding kNoError when clear) with atomicMin, so its final value is the
/// smallest code: the row the reference reports first. With `host` set (the asynchronous device-array paths),
/// the last block to finish copies the final word to host[0], then writes `seq` to host[1] (mapped pinned
/// memory the host polls without synchronising) and leaves `word` and `blocks` clear for the slot's next use.
/// With `host` null (the synchronous numpy paths) the caller reads `word` itself. `launched` (host memory,
/// optional) is set by the launcher when it enqueued a kernel (empty inputs launch nothing).
struct ErrorSink {
  unsigned long long* word = nullptr;
  unsigned int* blocks = nullptr;
  unsigned long long* host = nullptr;
  unsigned long long seq = 0;
  bool* launched = nullptr;
};

/// A ring of error slots on one device (ErrorSink word + block counter in device memory, the (code, seq) pair
/// in mapped pinned host memory). The bindings keep one per device and poll it at every call.
class ErrorLog {
 public:
  static constexpr std::size_t kSlots = 1024;
  static Status create(int device, std::unique_ptr<ErrorLog>* out);
  ~ErrorLog();
  ErrorLog(const ErrorLog&) = delete;
  ErrorLog& operator=(const ErrorLog&) = delete;
  /// The sink of slot `slot` for a launch numbered `seq` (> 0).
  ErrorSink sink(std::size_t slot, unsigned long long seq) const noexcept;
  /// True when the launch numbered `seq` in `slot` has finished; its final word goes to *code.
  bool finished(std::size_t slot, unsigned long long seq, unsigned long long* code) const noexcept;
  int device() const noexcept { return device_; }

 private:
  ErrorLog() = default;
  int device_ = 0;
  unsigned long long* words_ = nullptr;   // device, kSlots
  unsigned int* blocks_ = nullptr;        // device, kSlots
  unsigned long long* host_ = nullptr;    // mapped pinned host, 2 * kSlots
  unsigned long long* host_dev_ = nullptr;  // its device pointer
};

/// Number of visible CUDA devices; 0 when the driver or a device is missing (never an error).
int device_count() noexcept;
/// CUDA runtime version the module was built with, e.g. "13.0".
std::string runtime_version();
/// SM architectures compiled into the module, e.g. {80, 90}.
std::vector<int> compiled_architectures();

/// route() on device memory. All pointers in args/out are device pointers (outputs C-contiguous).
/// The kernel reports (b * 2 + which) * N + n for every non-finite row (which: 0 = q, 1 = k) to `err`, so its
/// final word names the reference's row. Asynchronous on `stream`.
Status launch_route(const RouteArgs& args, const RouteOut& out, const ErrorSink& err, void* stream);
/// The route kernel's limits on N (agents per episode) and D: unsupported naming `n_arg` / `d_arg` when exceeded
/// (launch_route and route_indexed check them before anything is enqueued).
Status check_route_limits(std::int64_t N, std::int64_t D, const char* n_arg, const char* d_arg);

/// toposort() on device memory, asynchronous on `stream`. With weights, the kernel reports
/// ((which * B + b) * N + src) * N + dst for every weight that is non-finite (which 0) or negative (which 1).
Status launch_toposort(const ToposortArgs& args, const ToposortOut& out, const ErrorSink& err, void* stream);

/// Names of the visible devices, e.g. "NVIDIA H100 80GB HBM3 (sm_90)"; empty when none (never an error).
std::vector<std::string> device_names();

/// launch_route / launch_toposort with `device` made current for the launch and the caller's current device
/// restored afterwards (the arrays of a DLPack call live on `device`, the calling thread may have another).
Status launch_route_on(int device, const RouteArgs& args, const RouteOut& out, const ErrorSink& err,
                       void* stream);
Status launch_toposort_on(int device, const ToposortArgs& args, const ToposortOut& out, const ErrorSink& err,
                          void* stream);

/// Stream-ordered device memory for kernel outputs: `bytes` from `device`'s toporoute pool, usable on `stream`
/// (and on any stream after it), freed with device_free_async. The pool keeps up to 256 MiB of freed memory for
/// reuse. *ptr is null for 0 bytes.
Status device_alloc_async(int device, std::size_t bytes, void* stream, void** ptr);
/// Returns memory of device_alloc_async once the work enqueued on `stream` so far is done; never throws.
void device_free_async(int device, void* ptr, void* stream) noexcept;
/// Waits for all work on `device` (cudaDeviceSynchronize with `device` current).
Status synchronize_device(int device);

/// Convenience paths for host (numpy) memory: copy inputs to `device`, launch, copy outputs back, free.
/// Inputs must be C-contiguous here. Synchronous. Non-finite input gives StatusCode::non_finite.
Status route_host(const RouteArgs& args, const RouteOut& out, int device);
Status toposort_host(const ToposortArgs& args, const ToposortOut& out, int device);

// ------------------------------------------------------------------------------------------------ Q-Mix

/// A Linear of the device weights: w is K x out (transposed, row-major: threads reading consecutive outputs of
/// one k are coalesced), b has out floats. Offsets in floats.
struct QMixDeviceLinear {
  std::size_t w = 0, b = 0;
  std::int64_t K = 0, out = 0;
};

/// A GRUCell: wih Kx x 3H and whh H x 3H (transposed, gates r, z, n), bih and bhh 3H floats.
struct QMixDeviceGru {
  std::size_t wih = 0, whh = 0, bih = 0, bhh = 0;
};

/// Where each tensor lives in the device buffer. Message-passing layer l is at layer0 + l * layer_stride, with
/// `message` and `update` offsets relative to that. Mixer: hyper_w1 (w1a, w1b), hyper_b1 (b1a, and b1b when
/// b1_hidden; otherwise b1a is the single Linear), hyper_w2 (w2a, w2b), hyper_b2 (b2a, b2b).
struct QMixDeviceLayout {
  QMixDeviceLinear input, head0, head2;
  std::size_t layer0 = 0, layer_stride = 0;
  QMixDeviceLinear message;
  QMixDeviceGru update;
  std::size_t gamma = 0, beta = 0;
  QMixDeviceGru rnn;
  QMixDeviceLinear w1a, w1b, b1a, b1b, w2a, w2b, b2a, b2b;
  std::size_t floats = 0;
};

/// Agent Q-Mix weights copied to one device in the QMixDeviceLayout. Immutable; the memory is freed (on its
/// device) with the object.
class QMixDeviceWeights {
 public:
  /// Raw float32 C-contiguous host tensors in qmix_agent_specs / qmix_mixer_specs order (mixer may be empty),
  /// checked by the caller. Synchronous.
  static Status create(const QMixConfig& config, const std::vector<const float*>& agent,
                       const std::vector<const float*>& mixer, int device,
                       std::shared_ptr<const QMixDeviceWeights>* out);
  ~QMixDeviceWeights();
  QMixDeviceWeights(const QMixDeviceWeights&) = delete;
  QMixDeviceWeights& operator=(const QMixDeviceWeights&) = delete;

  const QMixConfig& config() const noexcept { return config_; }
  const QMixDeviceLayout& layout() const noexcept { return layout_; }
  bool has_mixer() const noexcept { return has_mixer_; }
  int device() const noexcept { return device_; }
  /// Device memory.
  const float* data() const noexcept { return data_; }

 private:
  QMixDeviceWeights() = default;
  QMixConfig config_;
  QMixDeviceLayout layout_;
  bool has_mixer_ = false;
  int device_ = 0;
  float* data_ = nullptr;
};

/// Most agents per episode the CUDA Q-Mix kernels take (the neighbour sets are 64-bit masks).
constexpr std::int64_t kQMixMaxAgents = 64;

/// qmix_forward() on device memory (args / out pointers on w.device(), outputs C-contiguous). The kernel
/// reports (which * B + b) * N + n for every non-finite input row (which: 0 = obs, 1 = hidden) to `err`, so its
/// final word names the reference's row. Asynchronous.
Status launch_qmix_forward(const QMixDeviceWeights& w, const QMixForwardArgs& args, const QMixForwardOut& out,
                           const ErrorSink& err, void* stream);

/// qmix_mix() on device memory; reports which * B + b (which: 0 = q_taken, 1 = state). Asynchronous.
Status launch_qmix_mix(const QMixDeviceWeights& w, const QMixMixArgs& args, float* q_tot, const ErrorSink& err,
                       void* stream);

/// The launchers with w.device() made current for the launch (and the caller's device restored).
Status launch_qmix_forward_on(const QMixDeviceWeights& w, const QMixForwardArgs& args, const QMixForwardOut& out,
                              const ErrorSink& err, void* stream);
Status launch_qmix_mix_on(const QMixDeviceWeights& w, const QMixMixArgs& args, float* q_tot,
                          const ErrorSink& err, void* stream);

/// Host (numpy) memory: C-contiguous inputs are copied to w.device() in chunks of episodes, outputs copied back.
/// Synchronous; non-finite input gives StatusCode::non_finite naming the reference's row.
Status qmix_forward_host(const QMixDeviceWeights& w, const QMixForwardArgs& args, const QMixForwardOut& out);
Status qmix_mix_host(const QMixDeviceWeights& w, const QMixMixArgs& args, float* q_tot);

}  // namespace toporoute::cuda
