/// \file host.cu
/// Host side of the CUDA backend: device discovery, build facts, and the synchronous host-memory entry points
/// (copy in, launch, copy out). Every device allocation is owned by an RAII buffer and every device switch
/// is undone on return, so no error path leaks memory or changes the caller's current device.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "cuda_check.cuh"
#include "host_util.cuh"
#include "launch.hpp"

#ifndef TOPOROUTE_CUDA_ARCH_LIST
#define TOPOROUTE_CUDA_ARCH_LIST ""
#endif

namespace toporoute::cuda {
namespace {

using detail::ChunkedTransfer;
using detail::DeviceScope;
using detail::require_c_contiguous;
using detail::invalid;
using detail::status_from_cuda;

// The kernel's code is the smallest (b * 2 + which) * N + n over a chunk starting at episode b0: the first
// episode with a non-finite row, q before k, then the agent; the reference reports the same row.
Status non_finite_status(std::int64_t N, std::int64_t b0, unsigned long long code) {
  const auto n = static_cast<unsigned long long>(N);
  const char* name = (code / n) % 2 == 1 ? "k" : "q";
  return Status::error(StatusCode::non_finite, name,
                       std::string(name) + " must be finite; got NaN or infinity at episode " +
                           std::to_string(static_cast<unsigned long long>(b0) + code / (2 * n)) + ", agent " +
                           std::to_string(code % n));
}

}  // namespace

int device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

std::string runtime_version() {
  return std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
}

std::vector<int> compiled_architectures() {
  // CMake passes e.g. "80,90"; entries like "90a" keep their number, anything without digits is skipped.
  std::vector<int> archs;
  const std::string list = TOPOROUTE_CUDA_ARCH_LIST;
  std::size_t i = 0;
  while (i < list.size()) {
    const std::size_t end = std::min(list.find_first_of(",;", i), list.size());
    int value = 0;
    bool digits = false;
    for (std::size_t c = i; c < end && list[c] >= '0' && list[c] <= '9'; ++c) {
      value = value * 10 + (list[c] - '0');
      digits = true;
    }
    if (digits) archs.push_back(value);
    i = end + 1;
  }
  return archs;
}

std::vector<std::string> device_names() {
  std::vector<std::string> names;
  const int count = device_count();
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
      cudaGetLastError();
      names.emplace_back("unknown");
      continue;
    }
    names.push_back(std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) +
                    ")");
  }
  return names;
}

Status launch_route_on(int device, const RouteArgs& args, const RouteOut& out, const ErrorSink& err,
                       void* stream) {
  DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter_fast(device));
  return launch_route(args, out, err, stream);
}

Status launch_toposort_on(int device, const ToposortArgs& args, const ToposortOut& out, const ErrorSink& err,
                          void* stream) {
  DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter_fast(device));
  return launch_toposort(args, out, err, stream);
}

// ------------------------------------------------------------------------- asynchronous outputs and errors

namespace {

// The stream-ordered pool of one device: freed blocks stay cached (up to the threshold) for the next call's
// outputs, so a back-to-back small call allocates without the driver.
constexpr std::uint64_t kPoolKeepBytes = std::uint64_t{256} << 20;

Status device_pool(int device, cudaMemPool_t* pool) {
  // one pool per device, made on first use and kept for the process (like the runtime's own device state);
  // callers may run without the GIL
  static std::mutex mutex;
  static std::vector<cudaMemPool_t> pools;
  if (device < 0) return invalid("device", "device must be >= 0");
  const std::lock_guard<std::mutex> lock(mutex);
  if (static_cast<std::size_t>(device) < pools.size() && pools[static_cast<std::size_t>(device)] != nullptr) {
    *pool = pools[static_cast<std::size_t>(device)];
    return Status::success();
  }
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t made = nullptr;
  TOPOROUTE_RETURN_IF_ERROR(status_from_cuda(cudaMemPoolCreate(&made, &props), "cudaMemPoolCreate"));
  std::uint64_t keep = kPoolKeepBytes;
  TOPOROUTE_RETURN_IF_ERROR(status_from_cuda(
      cudaMemPoolSetAttribute(made, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute"));
  if (pools.size() <= static_cast<std::size_t>(device)) pools.resize(static_cast<std::size_t>(device) + 1, nullptr);
  pools[static_cast<std::size_t>(device)] = made;
  *pool = made;
  return Status::success();
}

}  // namespace

Status device_alloc_async(int device, std::size_t bytes, void* stream, void** ptr) {
  *ptr = nullptr;
  if (bytes == 0) return Status::success();
  cudaMemPool_t pool = nullptr;
  TOPOROUTE_RETURN_IF_ERROR(device_pool(device, &pool));
  DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter_fast(device));
  const cudaError_t e = cudaMallocFromPoolAsync(ptr, bytes, pool, static_cast<cudaStream_t>(stream));
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return Status::out_of_memory("cuda", "the outputs in device memory of cuda:" + std::to_string(device), bytes);
  }
  return status_from_cuda(e, "cudaMallocFromPoolAsync");
}

void device_free_async(int device, void* ptr, void* stream) noexcept {
  if (ptr == nullptr) return;
  int previous = 0;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device;
  if (switched) cudaSetDevice(device);
  if (cudaFreeAsync(ptr, static_cast<cudaStream_t>(stream)) != cudaSuccess) cudaGetLastError();
  if (switched) cudaSetDevice(previous);
}

Status synchronize_device(int device) {
  DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter(device));
  return status_from_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

Status ErrorLog::create(int device, std::unique_ptr<ErrorLog>* out) {
  DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter(device));
  std::unique_ptr<ErrorLog> log(new ErrorLog());
  log->device_ = device;
  void* words = nullptr;
  void* blocks = nullptr;
  TOPOROUTE_RETURN_IF_ERROR(detail::device_malloc(&words, kSlots * sizeof(unsigned long long), "cuda", "error slots"));
  log->words_ = static_cast<unsigned long long*>(words);
  TOPOROUTE_RETURN_IF_ERROR(detail::device_malloc(&blocks, kSlots * sizeof(unsigned int), "cuda", "error slots"));
  log->blocks_ = static_cast<unsigned int*>(blocks);
  TOPOROUTE_RETURN_IF_ERROR(status_from_cuda(cudaMemset(words, 0xff, kSlots * sizeof(unsigned long long)), "cudaMemset"));
  TOPOROUTE_RETURN_IF_ERROR(status_from_cuda(cudaMemset(blocks, 0, kSlots * sizeof(unsigned int)), "cudaMemset"));
  void* host = nullptr;
  TOPOROUTE_RETURN_IF_ERROR(status_from_cuda(
      cudaHostAlloc(&host, 2 * kSlots * sizeof(unsigned long long), cudaHostAllocMapped | cudaHostAllocPortable),
      "cudaHostAlloc"));
  log->host_ = static_cast<unsigned long long*>(host);
  for (std::size_t i = 0; i < 2 * kSlots; ++i) log->host_[i] = 0;
  void* host_dev = nullptr;
  TOPOROUTE_RETURN_IF_ERROR(status_from_cuda(cudaHostGetDevicePointer(&host_dev, host, 0), "cudaHostGetDevicePointer"));
  log->host_dev_ = static_cast<unsigned long long*>(host_dev);
  *out = std::move(log);
  return Status::success();
}

ErrorLog::~ErrorLog() {
  int previous = 0;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device_;
  if (switched) cudaSetDevice(device_);
  if (words_ != nullptr) cudaFree(words_);
  if (blocks_ != nullptr) cudaFree(blocks_);
  if (host_ != nullptr) cudaFreeHost(host_);
  if (switched) cudaSetDevice(previous);
}

ErrorSink ErrorLog::sink(std::size_t slot, unsigned long long seq) const noexcept {
  ErrorSink s;
  s.word = words_ + slot;
  s.blocks = blocks_ + slot;
  s.host = host_dev_ + 2 * slot;
  s.seq = seq;
  return s;
}

bool ErrorLog::finished(std::size_t slot, unsigned long long seq, unsigned long long* code) const noexcept {
  const volatile unsigned long long* h = host_ + 2 * slot;
  if (h[1] != seq) return false;
  std::atomic_thread_fence(std::memory_order_acquire);
  *code = h[0];
  return true;
}

Status route_host(const RouteArgs& args, const RouteOut& out, int device) {
  const std::int64_t B = args.B, N = args.N, D = args.D, K = args.K;
  if (B < 0 || N < 0 || D < 0 || K < 0) return invalid("q", "route: B, N, D and K must be >= 0");
  TOPOROUTE_RETURN_IF_ERROR(require_c_contiguous("q", {{B, args.q_sb}, {N, args.q_sn}, {D, 1}}));
  TOPOROUTE_RETURN_IF_ERROR(require_c_contiguous("k", {{B, args.k_sb}, {N, args.k_sn}, {D, 1}}));
  TOPOROUTE_RETURN_IF_ERROR(require_c_contiguous("active", {{B, args.a_sb}, {N, args.a_sn}}, args.active != nullptr));
  if (B == 0 || N == 0) return launch_route(args, out, ErrorSink{}, nullptr);  // validates, launches nothing

  DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter(device));

  // Per-episode rows; the batch goes through one device buffer in chunks of episodes.
  const auto n = static_cast<std::size_t>(N);
  const std::size_t q_row = n * static_cast<std::size_t>(D) * sizeof(float);
  ChunkedTransfer t;
  const int q = t.input(args.q, q_row), k = t.input(args.k, q_row), active = t.input(args.active, n);
  const int scores = t.output(out.scores, n * n * sizeof(float)), adjacency = t.output(out.adjacency, n * n);
  const int inbox = t.output(out.inbox, n * static_cast<std::size_t>(K) * sizeof(std::int32_t));
  const int in_degree = t.output(out.in_degree, n * sizeof(std::int32_t));
  const int err = t.error_word();
  TOPOROUTE_RETURN_IF_ERROR(t.allocate("route", B));

  RouteArgs dev = args;
  dev.q = t.device<const float>(q);
  dev.k = t.device<const float>(k);
  dev.active = t.device<const std::uint8_t>(active);
  dev.q_sb = dev.k_sb = N * D;
  dev.q_sn = dev.k_sn = D;
  dev.a_sb = N;
  dev.a_sn = 1;
  const RouteOut dout{t.device<float>(scores), t.device<std::uint8_t>(adjacency), t.device<std::int32_t>(inbox),
                      t.device<std::int32_t>(in_degree)};
  // The per-thread default stream: concurrent callers on different host threads do not serialise.
  const cudaStream_t st = cudaStreamPerThread;
  return t.run(
      B, st, "route_kernel",
      [&](std::int64_t, std::int64_t count) {
        dev.B = count;
        return launch_route(dev, dout, ErrorSink{t.device<unsigned long long>(err)}, st);
      },
      // chunks run in episode order, so the first chunk with a bad row holds the first bad episode
      [&](std::int64_t b0, std::int64_t, unsigned long long code) {
        return code == ~0ull ? Status::success() : non_finite_status(N, b0, code);
      });
}

Status toposort_host(const ToposortArgs& args, const ToposortOut& out, int device) {
  TOPOROUTE_RETURN_IF_ERROR(
      detail::check_graph_layout(args, "toposort", "weights", args.weights, args.w_sb, args.w_sr, args.w_sc));
  const std::int64_t B = args.B, N = args.N;
  TOPOROUTE_RETURN_IF_ERROR(check_toposort_weights(args));
  if (B == 0) return Status::success();

  DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter(device));

  const auto n = static_cast<std::size_t>(N);
  ChunkedTransfer t;
  const int adj = t.input(args.adj, n * n), weights = t.input(args.weights, n * n * sizeof(float));
  const int active = t.input(args.active, n);
  const int order = t.output(out.order, n * sizeof(std::int32_t)), level = t.output(out.level, n * sizeof(std::int32_t));
  const int removed = t.output(out.removed, n * n), is_dag = t.output(out.is_dag, 1);
  TOPOROUTE_RETURN_IF_ERROR(t.allocate("toposort", B));

  ToposortArgs dev = args;
  dev.adj = t.device<const std::uint8_t>(adj);
  dev.weights = t.device<const float>(weights);
  dev.active = t.device<const std::uint8_t>(active);
  dev.adj_sb = dev.w_sb = N * N;
  dev.adj_sr = dev.w_sr = N;
  dev.adj_sc = dev.w_sc = 1;
  dev.a_sb = N;
  dev.a_sn = 1;
  const ToposortOut dout{t.device<std::int32_t>(order), t.device<std::int32_t>(level), t.device<std::uint8_t>(removed),
                         t.device<std::uint8_t>(is_dag)};
  const cudaStream_t st = cudaStreamPerThread;
  return t.run(
      B, st, "toposort kernel",
      [&](std::int64_t, std::int64_t count) {
        dev.B = count;
        return launch_toposort(dev, dout, ErrorSink{}, st);
      },
      [](std::int64_t, std::int64_t, unsigned long long) { return Status::success(); });
}

// ------------------------------------------------------------------------------------------------ Q-Mix

namespace {

// Transposes a Linear (out x K, row-major) and copies its bias into the staging buffer.
void put_linear(std::vector<float>& buf, const QMixDeviceLinear& d, const float* weight, const float* bias) {
  for (std::int64_t o = 0; o < d.out; ++o) {
    for (std::int64_t k = 0; k < d.K; ++k) buf[d.w + static_cast<std::size_t>(k * d.out + o)] = weight[o * d.K + k];
    buf[d.b + static_cast<std::size_t>(o)] = bias[o];
  }
}

// A GRUCell's weight_ih (3H x Kx) and weight_hh (3H x H) transposed, biases copied.
void put_gru(std::vector<float>& buf, const QMixDeviceGru& g, std::int64_t Kx, std::int64_t H, const float* const* t) {
  const std::int64_t G = 3 * H;
  for (std::int64_t row = 0; row < G; ++row) {
    for (std::int64_t k = 0; k < Kx; ++k) buf[g.wih + static_cast<std::size_t>(k * G + row)] = t[0][row * Kx + k];
    for (std::int64_t k = 0; k < H; ++k) buf[g.whh + static_cast<std::size_t>(k * G + row)] = t[1][row * H + k];
    buf[g.bih + static_cast<std::size_t>(row)] = t[2][row];
    buf[g.bhh + static_cast<std::size_t>(row)] = t[3][row];
  }
}

// Device buffer offsets (floats), each piece 256-byte aligned.
class FloatLayout {
 public:
  std::size_t take(std::int64_t floats) {
    const std::size_t at = size;
    size += (static_cast<std::size_t>(floats) + 63) / 64 * 64;
    return at;
  }
  QMixDeviceLinear linear(std::int64_t K, std::int64_t out) {
    QMixDeviceLinear d;
    d.K = K;
    d.out = out;
    d.w = take(K * out);
    d.b = take(out);
    return d;
  }
  QMixDeviceGru gru(std::int64_t Kx, std::int64_t H) {
    QMixDeviceGru g;
    g.wih = take(Kx * 3 * H);
    g.whh = take(H * 3 * H);
    g.bih = take(3 * H);
    g.bhh = take(3 * H);
    return g;
  }
  std::size_t size = 0;
};

QMixDeviceLayout qmix_layout(const QMixConfig& c, bool mixer) {
  const std::int64_t H = c.hidden, S = c.state_dim, Hh = c.hyper_hidden, M = c.mix_hidden;
  FloatLayout l;
  QMixDeviceLayout L;
  L.input = l.linear(c.obs_dim, H);
  FloatLayout layer;  // one message-passing layer, offsets relative to its start
  L.message = layer.linear(H, H);
  L.update = layer.gru(H, H);
  L.layer_stride = layer.size;
  L.layer0 = l.take(static_cast<std::int64_t>(layer.size) * c.gnn_layers);
  L.gamma = l.take(H);
  L.beta = l.take(H);
  L.rnn = l.gru(H, H);
  L.head0 = l.linear(H, c.head_hidden);
  L.head2 = l.linear(c.head_hidden, c.n_actions);
  if (mixer) {
    L.w1a = l.linear(S, Hh);
    L.w1b = l.linear(Hh, c.n_agents * M);
    L.b1a = l.linear(S, c.b1_hidden ? Hh : M);
    if (c.b1_hidden) L.b1b = l.linear(Hh, M);
    L.w2a = l.linear(S, Hh);
    L.w2b = l.linear(Hh, M);
    L.b2a = l.linear(S, Hh);
    L.b2b = l.linear(Hh, 1);
  }
  L.floats = l.size;
  return L;
}

Status qmix_non_finite(const char* name, std::int64_t b, std::int64_t n) {
  std::string msg = std::string(name) + " must be finite; got NaN or infinity at episode " + std::to_string(b);
  if (n >= 0) msg += ", agent " + std::to_string(n);
  return Status::error(StatusCode::non_finite, name, msg);
}

}  // namespace

Status QMixDeviceWeights::create(const QMixConfig& c, const std::vector<const float*>& agent,
                                 const std::vector<const float*>& mixer, int device,
                                 std::shared_ptr<const QMixDeviceWeights>* out) {
  const auto n_agent = static_cast<std::size_t>(12 + 6 * c.gnn_layers);
  const std::size_t n_mixer = c.b1_hidden ? 16 : 14;
  if (agent.size() != n_agent || (!mixer.empty() && mixer.size() != n_mixer)) {
    return invalid("params", "qmix: wrong number of weight tensors for this config");
  }
  std::shared_ptr<QMixDeviceWeights> w(new QMixDeviceWeights());
  w->config_ = c;
  w->has_mixer_ = !mixer.empty();
  w->device_ = device;
  const QMixDeviceLayout& L = w->layout_ = qmix_layout(c, w->has_mixer_);

  std::vector<float> buf(L.floats, 0.0f);
  const std::int64_t H = c.hidden;
  std::size_t t = 0;
  put_linear(buf, L.input, agent[0], agent[1]);
  t = 2;
  for (std::int64_t l = 0; l < c.gnn_layers; ++l) {
    const std::size_t base = L.layer0 + static_cast<std::size_t>(l) * L.layer_stride;
    QMixDeviceLinear msg = L.message;
    msg.w += base;
    msg.b += base;
    QMixDeviceGru upd = L.update;
    upd.wih += base;
    upd.whh += base;
    upd.bih += base;
    upd.bhh += base;
    put_linear(buf, msg, agent[t], agent[t + 1]);
    put_gru(buf, upd, H, H, &agent[t + 2]);
    t += 6;
  }
  std::copy(agent[t], agent[t] + H, buf.begin() + static_cast<std::ptrdiff_t>(L.gamma));
  std::copy(agent[t + 1], agent[t + 1] + H, buf.begin() + static_cast<std::ptrdiff_t>(L.beta));
  put_gru(buf, L.rnn, H, H, &agent[t + 2]);
  put_linear(buf, L.head0, agent[t + 6], agent[t + 7]);
  put_linear(buf, L.head2, agent[t + 8], agent[t + 9]);
  if (w->has_mixer_) {
    std::size_t u = 0;
    const QMixDeviceLinear* order[] = {&L.w1a, &L.w1b, &L.b1a, &L.b1b, &L.w2a, &L.w2b, &L.b2a, &L.b2b};
    for (const QMixDeviceLinear* d : order) {
      if (d == &L.b1b && !c.b1_hidden) continue;
      put_linear(buf, *d, mixer[u], mixer[u + 1]);
      u += 2;
    }
  }

  DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter(device));
  void* data = nullptr;
  TOPOROUTE_RETURN_IF_ERROR(detail::device_malloc(&data, buf.size() * sizeof(float), "QMixWeightsCuda", "the packed weights"));
  w->data_ = static_cast<float*>(data);
  TOPOROUTE_RETURN_IF_ERROR(status_from_cuda(
      cudaMemcpy(data, buf.data(), buf.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy"));
  *out = std::move(w);
  return Status::success();
}

QMixDeviceWeights::~QMixDeviceWeights() {
  if (data_ == nullptr) return;
  DeviceScope scope;
  if (scope.enter(device_).ok()) cudaFree(data_);
}

Status launch_qmix_forward_on(const QMixDeviceWeights& w, const QMixForwardArgs& args, const QMixForwardOut& out,
                              const ErrorSink& err, void* stream) {
  DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter_fast(w.device()));
  return launch_qmix_forward(w, args, out, err, stream);
}

Status launch_qmix_mix_on(const QMixDeviceWeights& w, const QMixMixArgs& args, float* q_tot,
                          const ErrorSink& err, void* stream) {
  DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter_fast(w.device()));
  return launch_qmix_mix(w, args, q_tot, err, stream);
}

Status qmix_forward_host(const QMixDeviceWeights& w, const QMixForwardArgs& a, const QMixForwardOut& out) {
  const QMixConfig& c = w.config();
  const std::int64_t B = a.B, N = a.N, H = c.hidden, A = c.n_actions;
  if (B < 0 || N < 0) return invalid("obs", "qmix: B and N must be >= 0");
  TOPOROUTE_RETURN_IF_ERROR(require_c_contiguous("obs", {{B, a.obs_sb}, {N, a.obs_sn}, {c.obs_dim, a.obs_sd}}));
  TOPOROUTE_RETURN_IF_ERROR(require_c_contiguous("adj", {{B, a.adj_sb}, {N, a.adj_sr}, {N, a.adj_sc}}));
  TOPOROUTE_RETURN_IF_ERROR(
      require_c_contiguous("hidden", {{B, a.hid_sb}, {N, a.hid_sn}, {H, a.hid_sd}}, a.hidden != nullptr));
  TOPOROUTE_RETURN_IF_ERROR(require_c_contiguous("active", {{B, a.act_sb}, {N, a.act_sn}}, a.active != nullptr));
  if (N > kQMixMaxAgents || B == 0 || N == 0) return launch_qmix_forward(w, a, out, ErrorSink{}, nullptr);

  DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter(w.device()));
  const auto n = static_cast<std::size_t>(N);
  ChunkedTransfer t;
  const int obs = t.input(a.obs, n * static_cast<std::size_t>(c.obs_dim) * sizeof(float));
  const int adj = t.input(a.adj, n * n);
  const int hid = t.input(a.hidden, n * static_cast<std::size_t>(H) * sizeof(float));
  const int act = t.input(a.active, n);
  const int q = t.output(out.q, n * static_cast<std::size_t>(A) * sizeof(float));
  const int h = t.output(out.hidden, n * static_cast<std::size_t>(H) * sizeof(float));
  const int err = t.error_word();
  TOPOROUTE_RETURN_IF_ERROR(t.allocate("qmix_forward", B));

  QMixForwardArgs dev = a;
  dev.obs = t.device<const float>(obs);
  dev.adj = t.device<const std::uint8_t>(adj);
  dev.hidden = t.device<const float>(hid);
  dev.active = t.device<const std::uint8_t>(act);
  dev.obs_sb = N * c.obs_dim;
  dev.obs_sn = c.obs_dim;
  dev.adj_sb = N * N;
  dev.adj_sr = N;
  dev.hid_sb = N * H;
  dev.hid_sn = H;
  dev.obs_sd = dev.adj_sc = dev.hid_sd = dev.act_sn = 1;
  dev.act_sb = N;
  const QMixForwardOut dout{t.device<float>(q), t.device<float>(h)};

  const cudaStream_t st = cudaStreamPerThread;
  std::int64_t hidden_b = -1, hidden_n = -1;  // the first non-finite hidden row seen (reported if obs is fine)
  TOPOROUTE_RETURN_IF_ERROR(t.run(
      B, st, "qmix_forward_kernel",
      [&](std::int64_t, std::int64_t count) {
        dev.B = count;
        return launch_qmix_forward(w, dev, dout, ErrorSink{t.device<unsigned long long>(err)}, st);
      },
      [&](std::int64_t b0, std::int64_t count, unsigned long long code) {
        if (code == ~0ull) return Status::success();
        const auto rows = static_cast<unsigned long long>(count * N);
        const auto b = b0 + static_cast<std::int64_t>(code % rows / n);
        const auto agent = static_cast<std::int64_t>(code % n);
        // obs is checked over the whole batch first (the reference's order): an obs row ends the search
        if (code < rows) return qmix_non_finite("obs", b, agent);
        if (hidden_b < 0) {
          hidden_b = b;
          hidden_n = agent;
        }
        return Status::success();
      }));
  if (hidden_b >= 0) return qmix_non_finite("hidden", hidden_b, hidden_n);
  return Status::success();
}

Status qmix_mix_host(const QMixDeviceWeights& w, const QMixMixArgs& a, float* q_tot) {
  const QMixConfig& c = w.config();
  const std::int64_t B = a.B;
  if (B < 0) return invalid("q_taken", "qmix_mix: B must be >= 0");
  TOPOROUTE_RETURN_IF_ERROR(require_c_contiguous("q_taken", {{B, a.q_sb}, {c.n_agents, a.q_sa}}));
  TOPOROUTE_RETURN_IF_ERROR(require_c_contiguous("state", {{B, a.s_sb}, {c.state_dim, a.s_sd}}));
  if (!w.has_mixer() || B == 0) return launch_qmix_mix(w, a, q_tot, ErrorSink{}, nullptr);

  DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter(w.device()));
  ChunkedTransfer t;
  const int q = t.input(a.q_taken, static_cast<std::size_t>(c.n_agents) * sizeof(float));
  const int state = t.input(a.state, static_cast<std::size_t>(c.state_dim) * sizeof(float));
  const int out = t.output(q_tot, sizeof(float));
  const int err = t.error_word();
  TOPOROUTE_RETURN_IF_ERROR(t.allocate("qmix_mix", B));
  QMixMixArgs dev = a;
  dev.q_taken = t.device<const float>(q);
  dev.state = t.device<const float>(state);
  dev.q_sb = c.n_agents;
  dev.s_sb = c.state_dim;
  dev.q_sa = dev.s_sd = 1;
  const cudaStream_t st = cudaStreamPerThread;
  std::int64_t state_b = -1;
  TOPOROUTE_RETURN_IF_ERROR(t.run(
      B, st, "qmix_mix_kernel",
      [&](std::int64_t, std::int64_t count) {
        dev.B = count;
        return launch_qmix_mix(w, dev, t.device<float>(out), ErrorSink{t.device<unsigned long long>(err)}, st);
      },
      [&](std::int64_t b0, std::int64_t count, unsigned long long code) {
        if (code == ~0ull) return Status::success();
        const auto b = b0 + static_cast<std::int64_t>(code % static_cast<unsigned long long>(count));
        if (code < static_cast<unsigned long long>(count)) return qmix_non_finite("q_taken", b, -1);
        if (state_b < 0) state_b = b;
        return Status::success();
      }));
  if (state_b >= 0) return qmix_non_finite("state", state_b, -1);
  return Status::success();
}

}  // namespace toporoute::cuda
