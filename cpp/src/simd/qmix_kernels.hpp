#pragma once
// Per-ISA kernels of qmix_forward / qmix_mix (float32). The kernels are one template (qmix_kernels.inl) over a
// small vector-traits type, instantiated in one translation unit per ISA with that unit's flags; everything in
// those units has internal linkage except the qmix_kernels_* entry points, so no code compiled for a wider ISA
// can leak into shared code. They must only be called after the dispatcher checked the CPU.
//
// Weight layout (shared by all ISAs, built by QMixWeights): a Linear with K inputs is a sequence of column
// panels of kPanel outputs, each K x kPanel floats (panel p at w + p K kPanel, element (k, c) at k kPanel + c),
// zero-padded past the real outputs; a GRUCell is panels of K x (3 kPanel) floats holding the r, z and n
// gates' columns side by side. Activation buffers have a row stride that is a multiple of kPanel and keep their
// padding columns at zero, so kernels always work on whole panels.
#include <cstdint>

#include "toporoute/dispatch.hpp"

namespace toporoute::simd {

constexpr std::int64_t kPanel = 16;

/// y[r, 0 : panels kPanel) = act(x[r, 0:K) W + bias) for r < rows; panels p < relu_panels get ReLU.
struct DenseCall {
  const float* x;
  std::int64_t ldx;
  std::int64_t rows, K;
  const float* w;
  const float* bias;  ///< panels * kPanel floats
  std::int64_t panels, relu_panels;
  float* y;
  std::int64_t ldy;
  const std::uint16_t* wamx = nullptr;  ///< the same weights in the AMX layout (amx_pack), or null
};

/// PyTorch GRUCell on whole panels: out = (1 - z) n + z h with r, z = sigmoid(x W_x{r,z} + h W_h{r,z} + b),
/// n = tanh(x W_xn + b_in + r (h W_hn + b_hn)). wx: panels of Kx x 3 kPanel; wh: panels of H x 3 kPanel, or null
/// when h is null (a zero state: its products are skipped). bias: per panel 4 kPanel floats (b_r and b_z with
/// the ih and hh biases summed, b_in, b_hn). h rows must hold panels kPanel columns; out must not alias x or h.
struct GruCall {
  const float* x;
  std::int64_t ldx, Kx;
  const float* h;
  std::int64_t ldh, H;
  std::int64_t rows;
  const float* wx;
  const float* wh;
  const float* bias;
  std::int64_t panels;
  float* out;
  std::int64_t ldo;
  float* work;  ///< rows x 3 kPanel floats of scratch (the input side's sums), used when h is not null
  const std::uint16_t* wxamx = nullptr;  ///< wx in the AMX layout (amx_pack), or null
  const std::uint16_t* whamx = nullptr;  ///< wh in the AMX layout, or null (also when h is null)
};

/// In-place LayerNorm over the first H columns of each row: (x - mean) / sqrt(var + eps) gamma + beta.
struct NormCall {
  float* x;
  std::int64_t ld, rows, H;
  const float* gamma;
  const float* beta;
  float eps;
};

/// Neighbour mean of one episode: out[i] = (sum over t < cnt[i] of m[nbr[i N + t]]) / cnt[i], or 0 when
/// cnt[i] = 0, over `cols` columns (a multiple of kPanel).
struct AggregateCall {
  const float* m;
  std::int64_t ldm, N, cols;
  const std::int32_t* nbr;
  const std::int32_t* cnt;
  float* out;
  std::int64_t ldo;
};

/// The mixer's last step per row: hid = elu(b1 + sum_a q_a |w1[a Mp : a Mp + Mp)|), q_tot = hid . |w2| + b2[0].
/// Mp (a multiple of kPanel) columns per agent block; padding columns are zero in w1, b1 and w2.
struct MixCombineCall {
  std::int64_t rows, n_agents, Mp;
  const float* q;  ///< rows x n_agents, row stride ldq
  std::int64_t ldq;
  const float* w1;
  std::int64_t ldw1;
  const float* b1;
  std::int64_t ldb1;
  const float* w2;
  std::int64_t ldw2;
  const float* b2;
  std::int64_t ldb2;
  float* out;  ///< rows floats
};

struct QmixKernels {
  void (*dense)(const DenseCall&);
  void (*gru)(const GruCall&);
  void (*layer_norm)(const NormCall&);
  void (*aggregate)(const AggregateCall&);
  void (*mix_combine)(const MixCombineCall&);
};

/// AMX weight layout (bf16x3): a matrix of K rows and T column tiles of kPanel columns, K zero-padded to
/// whole blocks of kAmxK, stored per tile t, per K block, per part (hi, mid, lo: x = hi + mid + lo exactly,
/// each a bf16 truncation of what is left) as 16 rows of pairs (k = 2 i, 2 i + 1) x kPanel columns:
/// amx_pack_size(K, T) uint16 values.
constexpr std::int64_t kAmxK = 32;
inline std::int64_t amx_pack_size(std::int64_t K, std::int64_t tiles) {
  return tiles * ((K + kAmxK - 1) / kAmxK) * 3 * 16 * 2 * kPanel;
}
/// Packs src into the AMX layout: column tile t, element (k, c) at src[(t / G) K G kPanel + k G kPanel +
/// (t % G) kPanel + c] (G = 1: a Linear's panels; G = 3: a GRUCell's gate panels).
void amx_pack(const float* src, std::int64_t K, std::int64_t tiles, std::int64_t G, std::uint16_t* dst);

const QmixKernels& qmix_kernels_generic();
#if defined(TOPOROUTE_HAVE_X86_SIMD)
const QmixKernels& qmix_kernels_avx2();
const QmixKernels& qmix_kernels_avx512();
#endif
#if defined(TOPOROUTE_HAVE_AMX)
/// The AVX-512 kernels with the Linear and GRUCell products on AMX tiles (bf16x3) when the call carries AMX
/// weights (qmix_amx.cpp).
const QmixKernels& qmix_kernels_amx();
#endif

/// The kernels for an ISA the dispatcher has validated.
const QmixKernels& qmix_kernels_for(Isa isa);

}  // namespace toporoute::simd
