// Unit tests of route()'s float32 pass for large teams (cpp/src/simd/cosine_kernels.inl) through portable 16-lane
// traits with the same reduction order as the ISA ones: every block size, tail length and piece count; a value
// depends only on its two rows; the lists by recipient hold exactly the pairs above the floor, in ascending
// order. That the AVX2 and AVX-512 traits give the same values bit for bit is checked from Python
// (tests/ops/test_parity.py).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "../src/simd/cosine_kernels.inl"
#include "check.hpp"

namespace {

using toporoute::simd::CosineArgs;
using toporoute::simd::cosine_driver;
using toporoute::simd::kPieceColumns;

template <int R_, int C_>
struct Lanes16 {
  struct V {
    float v[16];
  };
  static constexpr int kRows = R_, kCols = C_;
  static V zero() { return V{}; }
  static V load(const float* p) {
    V out;
    for (int l = 0; l < 16; ++l) out.v[l] = p[l];
    return out;
  }
  static V load_first(const float* p, std::int64_t n) {
    V out{};
    for (int l = 0; l < n; ++l) out.v[l] = p[l];
    return out;
  }
  static V fma(V a, V b, V c) {
    for (int l = 0; l < 16; ++l) c.v[l] = std::fma(a.v[l], b.v[l], c.v[l]);
    return c;
  }
  static float hsum(V a) {
    for (int half = 8; half >= 1; half /= 2)
      for (int l = 0; l < half; ++l) a.v[l] = a.v[l] + a.v[l + half];
    return a.v[0];
  }
  static void sums(const V (&acc)[kRows][kCols], float (&out)[kRows][kCols]) {
    for (int r = 0; r < kRows; ++r)
      for (int c = 0; c < kCols; ++c) out[r][c] = hsum(acc[r][c]);
  }
};

struct Team {
  std::int64_t N, D, k_sn, q_sn;
  std::vector<float> k, q;
  std::vector<double> ks, qs;
};

// N rows of D values in rows of k_sn / q_sn floats; the padding is NaN (the driver must never read it, masked
// tails included), scales 1 / |row| (0 for a few rows, as for rows without edges).
Team team(std::mt19937_64& rng, std::int64_t N, std::int64_t D) {
  Team t{N, D, D + 5, D + 1, {}, {}, {}, {}};
  t.k.assign(static_cast<std::size_t>(N * t.k_sn + 16), std::nanf(""));
  t.q.assign(static_cast<std::size_t>(N * t.q_sn + 16), std::nanf(""));
  std::normal_distribution<float> g;
  for (std::int64_t r = 0; r < N; ++r) {
    double kk = 0, qq = 0;
    for (std::int64_t c = 0; c < D; ++c) {
      const float a = g(rng), b = g(rng) + 0.3f * a;  // correlated: cosines well above 0
      t.k[static_cast<std::size_t>(r * t.k_sn + c)] = a;
      t.q[static_cast<std::size_t>(r * t.q_sn + c)] = b;
      kk += static_cast<double>(a) * a;
      qq += static_cast<double>(b) * b;
    }
    t.ks.push_back(r % 7 == 3 ? 0.0 : 1.0 / std::sqrt(kk));
    t.qs.push_back(r % 5 == 2 ? 0.0 : 1.0 / std::sqrt(qq));
  }
  return t;
}

struct Result {
  std::vector<float> scores;
  std::vector<std::int32_t> cand;
  std::vector<double> value;
  std::vector<std::int64_t> count;
};

template <class F>
Result run(const Team& t, std::int64_t N, double low) {
  const auto n = static_cast<std::size_t>(N);
  Result r{std::vector<float>(n * n, -7.0f), std::vector<std::int32_t>(n * n, -1), std::vector<double>(n * n),
           std::vector<std::int64_t>(n, -1)};
  std::vector<double> work(n * toporoute::simd::kCosineTile, std::nan(""));
  cosine_driver<F>(CosineArgs{t.k.data(), t.k_sn, t.ks.data(), t.q.data(), t.q_sn, t.qs.data(), N, t.D, low,
                              r.scores.data(), r.cand.data(), r.value.data(), r.count.data(), work.data()});
  return r;
}

// The pass's value against the float64 dot product: within the float32 bound route.cpp relies on.
template <class F>
int off_bound(const Team& t) {
  const double low = 0.1;
  const Result r = run<F>(t, t.N, low);
  const double u = 0x1p-24;
  const double lanes = static_cast<double>(std::min<std::int64_t>((t.D + 15) / 16, kPieceColumns / 16));
  int bad = 0;
  for (std::int64_t i = 0; i < t.N; ++i) {
    std::vector<std::int32_t> want;
    for (std::int64_t j = 0; j < t.N; ++j) {
      double dot = 0, abs_sum = 0;
      for (std::int64_t d = 0; d < t.D; ++d) {
        const double p = static_cast<double>(t.k[static_cast<std::size_t>(j * t.k_sn + d)]) *
                         t.q[static_cast<std::size_t>(i * t.q_sn + d)];
        dot += p;
        abs_sum += std::fabs(p);
      }
      const double scale = t.ks[static_cast<std::size_t>(j)] * t.qs[static_cast<std::size_t>(i)];
      const double exact = dot * scale;
      const double bound = (1.07 * (lanes + 4.0) * u + 1e-12) * abs_sum * scale;
      const float score = r.scores[static_cast<std::size_t>(j * t.N + i)];
      bad += !(std::fabs(static_cast<double>(score) - std::clamp(exact, -1.0, 1.0)) <= bound + 6e-8);
      if (static_cast<double>(score) > low + bound + 1e-7) want.push_back(static_cast<std::int32_t>(j));
    }
    // every pair clearly above the floor is listed, the list ascends and its values agree with the scores
    const std::int64_t count = r.count[static_cast<std::size_t>(i)];
    std::vector<std::int32_t> got(r.cand.begin() + i * t.N, r.cand.begin() + i * t.N + count);
    bad += !std::is_sorted(got.begin(), got.end()) || std::adjacent_find(got.begin(), got.end()) != got.end();
    for (const std::int32_t j : want) bad += !std::binary_search(got.begin(), got.end(), j);
    for (std::int64_t c = 0; c < count; ++c) {
      const double v = r.value[static_cast<std::size_t>(i * t.N + c)];
      const float s = r.scores[static_cast<std::size_t>(got[static_cast<std::size_t>(c)] * t.N + i)];
      bad += !(v > low) || s != static_cast<float>(std::clamp(v, -1.0, 1.0));
    }
  }
  return bad;
}

}  // namespace

TOPOROUTE_TEST(values_lie_within_the_float32_bound_for_every_block_tail_and_piece_count) {
  std::mt19937_64 rng(11);
  for (const std::int64_t D : {1, 7, 15, 16, 17, 33, 384, 511, 512, 513, 1100}) {
    for (const std::int64_t N : {1, 2, 5, 9}) {
      const Team t = team(rng, N, D);
      TOPOROUTE_CHECK_EQ((off_bound<Lanes16<4, 4>>(t)), 0);
      TOPOROUTE_CHECK_EQ((off_bound<Lanes16<2, 2>>(t)), 0);
      TOPOROUTE_CHECK_EQ((off_bound<Lanes16<3, 1>>(t)), 0);
    }
  }
}

// A pair's value depends only on its two rows: not on N, the block it falls in, the block size, or a tile edge.
TOPOROUTE_TEST(a_value_does_not_depend_on_the_team_or_the_block) {
  std::mt19937_64 rng(5);
  for (const std::int64_t D : {20, 700}) {  // one tile of q rows at D = 700 is 8 rows: N = 11 spans two
    const Team big = team(rng, 11, D);
    const Result ref = run<Lanes16<4, 4>>(big, 11, -2.0);
    for (std::int64_t N = 1; N <= 11; ++N) {
      const Result a = run<Lanes16<4, 4>>(big, N, -2.0), b = run<Lanes16<3, 1>>(big, N, -2.0);
      for (std::int64_t j = 0; j < N; ++j) {
        for (std::int64_t i = 0; i < N; ++i) {
          const float want = ref.scores[static_cast<std::size_t>(j * 11 + i)];
          TOPOROUTE_CHECK(a.scores[static_cast<std::size_t>(j * N + i)] == want);
          TOPOROUTE_CHECK(b.scores[static_cast<std::size_t>(j * N + i)] == want);
        }
      }
      // below every value: every provider listed, for every recipient
      for (std::int64_t i = 0; i < N; ++i) TOPOROUTE_CHECK_EQ(a.count[static_cast<std::size_t>(i)], N);
    }
  }
}

TOPOROUTE_TEST(scores_are_clamped_and_rows_scaled_by_zero_score_zero) {
  // identical rows scaled a little too far: cosines just above 1 are clamped to 1
  Team t{3, 16, 16, 16, std::vector<float>(48, 0.5f), std::vector<float>(48, 0.5f), {}, {}};
  t.ks = {0.5 * 1.000001, 0.0, 0.5};
  t.qs = {0.5, 0.5, 0.5};
  const Result r = run<Lanes16<4, 4>>(t, 3, 0.5);
  TOPOROUTE_CHECK(r.scores[0] == 1.0f);
  for (std::int64_t i = 0; i < 3; ++i) TOPOROUTE_CHECK(r.scores[static_cast<std::size_t>(3 + i)] == 0.0f);
  TOPOROUTE_CHECK_EQ(r.count[0], 2);  // providers 0 and 2; provider 1's scale is 0
}

int main() { return toporoute::test::run_all(); }
