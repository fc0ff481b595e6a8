// AMX qmix kernels (compiled with the AVX-512 flags plus -mamx-tile -mamx-bf16 -mavx512bw): the Linear and
// GRUCell products run on AMX tiles whenever the call carries AMX weights, everything else is the AVX-512
// code. At every row count, not from a threshold: a batch must give each episode its B = 1 result bit for
// bit (tests/ops/test_qmix_core.py), and a tile's row count depends on the batch and the thread count.
//
// bf16x3: each float32 x is hi + mid + lo exactly (three bf16 truncations of what is left: 8 + 8 + 8 of its
// 24 significant bits), and a product a b is summed as the six terms that reach float32 precision, ah bh +
// ah bm + am bh + am bm + ah bl + al bh (the dropped ones are below 2^-24 |a b|), each a TDPBF16PS that
// accumulates in float32 tiles. Weights are split and packed once (amx_pack, with the QMixWeights); the
// activations per call. A block is 2 x 2 output tiles (32 rows x 32 columns, 4 accumulators) and the other 4
// tiles hold operands: per K block of 32, 6 operand loads feed 4 products each way round (24 TDPBF16PS for 14
// tile loads). Measured on a Sapphire Rapids core (one thread, 192 x 128 rows times a 128 x 384 and a
// 128 x 128 matrix, float64 reference error 2e-7 of sum |a b|): 162 and 136 GMAC/s with the activations'
// split, against 80 to 88 for the AVX-512 register blocks on the same shapes. Operand tiles must be
// 64-byte aligned (a tile row that straddles two cache lines halves the rate): every buffer here is. A block
// of 16 rows or fewer uses one row tile (a TDPBF16PS costs about the same for 3 rows as for 16).
//
// In the whole forward the gain is smaller than per kernel: the AMX copy of the weights (6 bytes a weight,
// about 2 MB at the default shapes) no longer stays in a 2 MB L2 between tiles, and the rest of the pass
// (LayerNorm, neighbour means, copies) is unchanged. Measured (bench/test_bench_qmix.py, 2 threads, N = 3):
// qmix_forward 1.15x the avx512 level at B = 8, 1.2 to 1.3x at B = 64 and 1024, qmix_mix 1.3x at B = 64 and
// 1.45x at B = 1024; at B = 1 both are slower (the padded tile and the cold weights: forward 0.55 to 0.65x,
// mix 0.4x).
//
// Every output element is a fixed sequence of products over K (the hardware computes each element of a tile
// on its own), so a row's result does not depend on which other rows share its tile, nor on the thread.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <cstring>
#include <new>

#include "simd/qmix_kernels.hpp"

#include "simd/qmix_avx512_traits.hpp"
#include "thread_scratch.hpp"

#include "simd/qmix_kernels.inl"

namespace toporoute::simd {
namespace {

/// Rows per pass over the weights: their split activations (128 x K x 6 bytes) stay in L2 next to the
/// weights, whatever the batch.
constexpr std::int64_t kRowChunk = 128;
constexpr std::int64_t kTileVals = 16 * 2 * kPanel;  // bf16 values of one 1 KB operand tile

struct TileConfig {
  std::uint8_t palette_id;
  std::uint8_t start_row;
  std::uint8_t reserved[14];
  std::uint16_t colsb[16];
  std::uint8_t rows[16];
};

/// The tile state of the calling thread for one kernel call: 8 tiles of 16 rows x 64 bytes, released after.
class TileScope {
 public:
  TileScope() {
    TileConfig c{};
    c.palette_id = 1;
    for (int i = 0; i < 8; ++i) {
      c.colsb[i] = 64;
      c.rows[i] = 16;
    }
    _tile_loadconfig(&c);
  }
  ~TileScope() { _tile_release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

thread_local toporoute::detail::ThreadScratch tls_amx;

std::int64_t k_blocks(std::int64_t K) { return (K + kAmxK - 1) / kAmxK; }

/// Splits `rows` rows of x (K columns, row stride ldx) into operand tiles: row tile rt, K block kb, part p at
/// dst + ((rt KB + kb) 3 + p) kTileVals, 16 rows of 32 bf16; rows past `rows` (up to row_tiles x 16) and
/// columns past K are zero.
void split_rows(const float* x, std::int64_t ldx, std::int64_t rows, std::int64_t K, std::int64_t row_tiles,
                std::uint16_t* dst) {
  const std::int64_t KB = k_blocks(K);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  // the high 16-bit halves of two registers of 32-bit lanes, in lane order
  const __m512i odd = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                                       25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  for (std::int64_t row = 0; row < row_tiles * 16; ++row) {
    std::uint16_t* base = dst + (row / 16) * KB * 3 * kTileVals + (row % 16) * kAmxK;
    const float* src = x + row * ldx;
    for (std::int64_t kb = 0; kb < KB; ++kb) {
      std::uint16_t* out = base + kb * 3 * kTileVals;
      __m512i v[2];
      for (int half = 0; half < 2; ++half) {
        const std::int64_t k0 = kb * kAmxK + half * 16;
        const std::int64_t n = row < rows ? (K - k0 < 0 ? 0 : (K - k0 > 16 ? 16 : K - k0)) : 0;
        const __mmask16 m = static_cast<__mmask16>((1u << n) - 1u);
        v[half] = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, n > 0 ? src + k0 : src));
      }
      for (int part = 0; part < 3; ++part) {
        const __m512i h0 = _mm512_and_si512(v[0], high), h1 = _mm512_and_si512(v[1], high);
        _mm512_store_si512(out + part * kTileVals, _mm512_permutex2var_epi16(h0, odd, h1));
        v[0] = _mm512_castps_si512(_mm512_sub_ps(_mm512_castsi512_ps(v[0]), _mm512_castsi512_ps(h0)));
        v[1] = _mm512_castps_si512(_mm512_sub_ps(_mm512_castsi512_ps(v[1]), _mm512_castsi512_ps(h1)));
      }
    }
  }
}

/// y[r, t kPanel : (t + 1) kPanel) = bias_t + sum_k a[r, k] w[k, t] for r < rows and every column tile t of
/// the packed weights; ReLU on tiles t < relu_tiles. bias_t = bias + (t / G) bias_stride + (t % G) kPanel, or
/// zero when bias is null.
struct TileGemm {
  const std::uint16_t* a;  ///< split_rows output, row_tiles x 16 rows
  std::int64_t row_tiles, K;
  const std::uint16_t* w;  ///< amx_pack output
  std::int64_t tiles;
  const float* bias;
  std::int64_t G, bias_stride;
  std::int64_t relu_tiles;
  float* y;
  std::int64_t ldy, rows;
};

inline const float* tile_bias(const TileGemm& g, std::int64_t t) {
  return g.bias + (t / g.G) * g.bias_stride + (t % g.G) * kPanel;
}

// Output tiles 0 (rows 0-15) and 2 (rows 16-31, when Rows2) of column tile t; 1 and 3 of column tile t + 1
// when Cols2. Operands: 4 and 5 hold the two row tiles' part of a, 6 and 7 the two column tiles' part of w.
template <bool Rows2, bool Cols2>
inline void tile_block(const TileGemm& g, std::int64_t mt, std::int64_t t, float* tmp) {
  const std::int64_t KB = k_blocks(g.K);
  if (g.bias != nullptr) {
    _tile_loadd(0, tile_bias(g, t), 0);  // stride 0: the bias row in all 16 rows
    if constexpr (Rows2) _tile_loadd(2, tile_bias(g, t), 0);
    if constexpr (Cols2) _tile_loadd(1, tile_bias(g, t + 1), 0);
    if constexpr (Rows2 && Cols2) _tile_loadd(3, tile_bias(g, t + 1), 0);
  } else {
    _tile_zero(0);
    if constexpr (Rows2) _tile_zero(2);
    if constexpr (Cols2) _tile_zero(1);
    if constexpr (Rows2 && Cols2) _tile_zero(3);
  }
  constexpr std::int64_t S = 64;  // bytes per operand tile row
  const auto load_a = [](const std::uint16_t* a0, const std::uint16_t* a1) {
    _tile_loadd(4, a0, S);
    if constexpr (Rows2) _tile_loadd(5, a1, S);
  };
  const auto load_b = [](const std::uint16_t* b0, const std::uint16_t* b1) {
    _tile_loadd(6, b0, S);
    if constexpr (Cols2) _tile_loadd(7, b1, S);
  };
  const auto dp = [] {
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (Cols2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (Rows2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (Rows2 && Cols2) _tile_dpbf16ps(3, 5, 7);
  };
  for (std::int64_t kb = 0; kb < KB; ++kb) {
    const std::uint16_t* a0 = g.a + (mt * KB + kb) * 3 * kTileVals;
    const std::uint16_t* a1 = a0 + KB * 3 * kTileVals;
    const std::uint16_t* b0 = g.w + (t * KB + kb) * 3 * kTileVals;
    const std::uint16_t* b1 = b0 + KB * 3 * kTileVals;
    // the small terms first: al bh, am bh, am bm, ah bm, ah bl, ah bh
    load_a(a0 + 2 * kTileVals, a1 + 2 * kTileVals);
    load_b(b0, b1);
    dp();
    load_a(a0 + kTileVals, a1 + kTileVals);
    dp();
    load_b(b0 + kTileVals, b1 + kTileVals);
    dp();
    load_a(a0, a1);
    dp();
    load_b(b0 + 2 * kTileVals, b1 + 2 * kTileVals);
    dp();
    load_b(b0, b1);
    dp();
  }
  // Store: straight into y when all the block's rows exist, else through tmp (32 x 32 floats) and copy the
  // real rows.
  constexpr std::int64_t block_rows = Rows2 ? 32 : 16;
  const std::int64_t r0 = mt * 16, n = g.rows - r0 < block_rows ? g.rows - r0 : block_rows;
  const bool direct = n == block_rows;
  float* dst = direct ? g.y + r0 * g.ldy + t * kPanel : tmp;
  const std::int64_t ld = direct ? g.ldy : 32;
  _tile_stored(0, dst, ld * 4);
  if constexpr (Rows2) _tile_stored(2, dst + 16 * ld, ld * 4);
  if constexpr (Cols2) _tile_stored(1, dst + kPanel, ld * 4);
  if constexpr (Rows2 && Cols2) _tile_stored(3, dst + 16 * ld + kPanel, ld * 4);
  constexpr int cols = Cols2 ? 2 : 1;
  for (int j = 0; j < cols; ++j) {
    const bool relu = t + j < g.relu_tiles;
    if (direct && !relu) continue;
    for (std::int64_t r = 0; r < n; ++r) {
      __m512 v = _mm512_loadu_ps(dst + r * ld + j * kPanel);
      if (relu) v = _mm512_max_ps(v, _mm512_setzero_ps());
      _mm512_storeu_ps(g.y + (r0 + r) * g.ldy + (t + j) * kPanel, v);
    }
  }
}

template <bool Cols2>
inline void tile_column(const TileGemm& g, std::int64_t t, float* tmp) {
  std::int64_t mt = 0;
  for (; mt + 1 < g.row_tiles; mt += 2) tile_block<true, Cols2>(g, mt, t, tmp);
  if (mt < g.row_tiles) tile_block<false, Cols2>(g, mt, t, tmp);
}

void tile_gemm(const TileGemm& g, float* tmp) {
  std::int64_t t = 0;
  for (; t + 1 < g.tiles; t += 2) tile_column<true>(g, t, tmp);
  if (t < g.tiles) tile_column<false>(g, t, tmp);
}

std::int64_t row_tiles_of(std::int64_t rows) { return (rows + 15) / 16; }

std::size_t split_bytes(std::int64_t rows, std::int64_t K) {
  return static_cast<std::size_t>(row_tiles_of(rows) * k_blocks(K) * 3 * kTileVals) * sizeof(std::uint16_t);
}

void dense_amx(const DenseCall& c) {
  if (c.wamx == nullptr) return dense<Avx512>(c);
  const std::int64_t chunk = c.rows < kRowChunk ? c.rows : kRowChunk;
  const std::size_t a_bytes = split_bytes(chunk, c.K);
  auto* mem = static_cast<char*>(tls_amx.get(a_bytes + 32 * 32 * sizeof(float)));
  if (mem == nullptr) return dense<Avx512>(c);  // no scratch: the AVX-512 path needs none
  auto* a = reinterpret_cast<std::uint16_t*>(mem);
  auto* tmp = reinterpret_cast<float*>(mem + a_bytes);
  TileScope tiles;
  for (std::int64_t r0 = 0; r0 < c.rows; r0 += kRowChunk) {
    const std::int64_t n = c.rows - r0 < kRowChunk ? c.rows - r0 : kRowChunk;
    split_rows(c.x + r0 * c.ldx, c.ldx, n, c.K, row_tiles_of(n), a);
    tile_gemm({a, row_tiles_of(n), c.K, c.wamx, c.panels, c.bias, 1, kPanel, c.relu_panels, c.y + r0 * c.ldy,
               c.ldy, n},
              tmp);
  }
}

// The cells from the two sides' products: gx holds x Wx + (b_r, b_z, b_in), gh h Wh (no bias), per panel the
// r, z and n columns side by side (row stride ld); with gh null the hidden side is zero. kCellBlock panels of a
// row go through each step together: a cell is one long chain of dependent operations (exp, reciprocal, then
// tanh of a value that needs r), and independent chains side by side keep both vector ports busy.
constexpr std::int64_t kCellBlock = 4;

template <int NP>
inline void gru_cells_block(const GruCall& c, std::int64_t row, std::int64_t p0, const float* x, const float* h) {
  using T = Avx512;
  __m512 rr[NP], zz[NP], nh[NP], nx[NP];
#pragma GCC unroll 4
  for (int j = 0; j < NP; ++j) {
    const std::int64_t g = (p0 + j) * 3 * kPanel;
    const __m512 bh = T::load(c.bias + (p0 + j) * 4 * kPanel + 3 * kPanel);
    rr[j] = T::load(x + g);
    zz[j] = T::load(x + g + kPanel);
    nx[j] = T::load(x + g + 2 * kPanel);
    nh[j] = bh;
    if (h != nullptr) {
      rr[j] = T::add(rr[j], T::load(h + g));
      zz[j] = T::add(zz[j], T::load(h + g + kPanel));
      nh[j] = T::add(T::load(h + g + 2 * kPanel), bh);
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < NP; ++j) rr[j] = vsigmoid<T>(rr[j]);
#pragma GCC unroll 4
  for (int j = 0; j < NP; ++j) zz[j] = vsigmoid<T>(zz[j]);
#pragma GCC unroll 4
  for (int j = 0; j < NP; ++j) nx[j] = vtanh<T>(T::fma(rr[j], nh[j], nx[j]));
#pragma GCC unroll 4
  for (int j = 0; j < NP; ++j) {
    float* out = c.out + row * c.ldo + (p0 + j) * kPanel;
    if (h != nullptr) {
      T::store(out, T::fma(zz[j], T::sub(T::load(c.h + row * c.ldh + (p0 + j) * kPanel), nx[j]), nx[j]));
    } else {
      T::store(out, T::sub(nx[j], T::mul(zz[j], nx[j])));
    }
  }
}

void gru_cells_amx(const GruCall& c, std::int64_t r0, std::int64_t n, const float* gx, const float* gh,
                   std::int64_t ld) {
  for (std::int64_t r = 0; r < n; ++r) {
    const float* x = gx + r * ld;
    const float* h = gh != nullptr ? gh + r * ld : nullptr;
    std::int64_t p = 0;
    for (; p + kCellBlock <= c.panels; p += kCellBlock) gru_cells_block<kCellBlock>(c, r0 + r, p, x, h);
    for (; p < c.panels; ++p) gru_cells_block<1>(c, r0 + r, p, x, h);
  }
}

void gru_amx(const GruCall& c) {
  const bool has_h = c.h != nullptr;
  if (c.wxamx == nullptr || (has_h && c.whamx == nullptr)) return gru<Avx512>(c);
  const std::int64_t chunk = c.rows < kRowChunk ? c.rows : kRowChunk, tiles = 3 * c.panels, ld = tiles * kPanel;
  const std::size_t a_bytes = split_bytes(chunk, c.Kx > c.H ? c.Kx : c.H);
  const std::size_t g_bytes = static_cast<std::size_t>(chunk * ld) * sizeof(float);
  auto* mem = static_cast<char*>(tls_amx.get(a_bytes + 2 * g_bytes + 32 * 32 * sizeof(float)));
  if (mem == nullptr) return gru<Avx512>(c);
  auto* a = reinterpret_cast<std::uint16_t*>(mem);
  auto* gx = reinterpret_cast<float*>(mem + a_bytes);
  auto* gh = reinterpret_cast<float*>(mem + a_bytes + g_bytes);
  auto* tmp = reinterpret_cast<float*>(mem + a_bytes + 2 * g_bytes);
  TileScope scope;
  for (std::int64_t r0 = 0; r0 < c.rows; r0 += kRowChunk) {
    const std::int64_t n = c.rows - r0 < kRowChunk ? c.rows - r0 : kRowChunk, rt = row_tiles_of(n);
    split_rows(c.x + r0 * c.ldx, c.ldx, n, c.Kx, rt, a);
    tile_gemm({a, rt, c.Kx, c.wxamx, tiles, c.bias, 3, 4 * kPanel, 0, gx, ld, n}, tmp);
    if (has_h) {
      split_rows(c.h + r0 * c.ldh, c.ldh, n, c.H, rt, a);
      tile_gemm({a, rt, c.H, c.whamx, tiles, nullptr, 3, 0, 0, gh, ld, n}, tmp);
    }
    gru_cells_amx(c, r0, n, gx, has_h ? gh : nullptr, ld);
  }
}

}  // namespace

const QmixKernels& qmix_kernels_amx() {
  static constexpr QmixKernels kernels = {&dense_amx, &gru_amx, &layer_norm<Avx512>, &aggregate<Avx512>,
                                          &mix_combine<Avx512>};
  return kernels;
}

}  // namespace toporoute::simd
