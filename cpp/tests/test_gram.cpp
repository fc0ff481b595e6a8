// Unit tests of the gram driver (cpp/src/simd/gram_kernels.inl) through the portable lanes of gram_generic.cpp:
// the build's width and block, and other widths and blocks so every full step, partial step and clamped edge
// block of the driver runs. The ISA traits (AVX2, AVX-512) run the same driver and are checked from Python
// (tests/ops/test_parity.py, route at every SIMD level).
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "../src/simd/gram_generic.cpp"
#include "check.hpp"

namespace {

using toporoute::simd::GenericLanes;
using toporoute::simd::GramArgs;

double plain_dot(const float* a, const float* b, std::int64_t D) {
  double s = 0;
  for (std::int64_t c = 0; c < D; ++c) s += static_cast<double>(a[c]) * b[c];
  return s;
}

struct Episode {
  std::int64_t N, D, k_sn, q_sn;
  std::vector<float> k, q;
};

// N rows of D values in rows of k_sn / q_sn floats (padding filled with NaN: the driver must never read it).
Episode episode(std::mt19937_64& rng, std::int64_t N, std::int64_t D, bool integers) {
  Episode e{N, D, D + 3, D + 1, {}, {}};
  e.k.assign(static_cast<std::size_t>(N * e.k_sn + 8), std::nanf(""));
  e.q.assign(static_cast<std::size_t>(N * e.q_sn + 8), std::nanf(""));
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  std::uniform_int_distribution<int> small(-8, 8);
  auto value = [&] { return integers ? static_cast<float>(small(rng)) : real(rng); };
  for (std::int64_t r = 0; r < N; ++r) {
    for (std::int64_t c = 0; c < D; ++c) {
      e.k[static_cast<std::size_t>(r * e.k_sn + c)] = value();
      e.q[static_cast<std::size_t>(r * e.q_sn + c)] = value();
    }
  }
  return e;
}

// Runs `kernel` over e and counts the outputs that differ from plain loops by more than tol (relative).
template <class Kernel>
int mismatches(const Episode& e, Kernel kernel, double tol) {
  const auto n = static_cast<std::size_t>(e.N);
  std::vector<double> dots(n * n, -1.0), kss(n, -1.0), qss(n, -1.0);
  kernel(GramArgs{e.k.data(), e.k_sn, e.q.data(), e.q_sn, e.N, e.D, dots.data(), kss.data(), qss.data()});
  auto off = [tol](double got, double want) { return !(std::fabs(got - want) <= tol * (1.0 + std::fabs(want))); };
  int bad = 0;
  for (std::int64_t j = 0; j < e.N; ++j) {
    const float* kj = e.k.data() + j * e.k_sn;
    const float* qj = e.q.data() + j * e.q_sn;
    bad += off(kss[static_cast<std::size_t>(j)], plain_dot(kj, kj, e.D));
    bad += off(qss[static_cast<std::size_t>(j)], plain_dot(qj, qj, e.D));
    for (std::int64_t i = 0; i < e.N; ++i) {
      bad += off(dots[static_cast<std::size_t>(j * e.N + i)], plain_dot(kj, e.q.data() + i * e.q_sn, e.D));
    }
  }
  return bad;
}

template <class Lanes>
void check_lanes(double tol, bool integers) {
  std::mt19937_64 rng(7);
  for (std::int64_t N = 0; N <= 11; ++N) {
    for (std::int64_t D = 0; D <= 19; ++D) {
      const Episode e = episode(rng, N, D, integers);
      TOPOROUTE_CHECK_EQ(mismatches(e, toporoute::simd::gram_driver<Lanes>, tol), 0);
    }
  }
}

}  // namespace

// Small integers: every partial sum is exact, so any lane order must give the plain loop's value exactly.
TOPOROUTE_TEST(driver_is_exact_on_integers_for_every_width_and_block) {
  check_lanes<GenericLanes<4, 1, 4>>(0.0, true);
  check_lanes<GenericLanes<8, 4, 4>>(0.0, true);
  check_lanes<GenericLanes<4, 2, 4>>(0.0, true);
  check_lanes<GenericLanes<3, 3, 5>>(0.0, true);
  check_lanes<GenericLanes<1, 1, 1>>(0.0, true);
}

TOPOROUTE_TEST(driver_matches_plain_float64_loops) {
  check_lanes<GenericLanes<4, 1, 4>>(1e-12, false);
  check_lanes<GenericLanes<8, 4, 4>>(1e-12, false);
  check_lanes<GenericLanes<5, 2, 3>>(1e-12, false);
}

// A dot product's value must not depend on N or on the block its rows fall in (route's results per agent do
// not change with the size of the team).
TOPOROUTE_TEST(a_dot_product_does_not_depend_on_n) {
  std::mt19937_64 rng(3);
  const Episode big = episode(rng, 9, 13, false);
  std::vector<double> ref(81), kss(9), qss(9);
  toporoute::simd::gram_generic(
      {big.k.data(), big.k_sn, big.q.data(), big.q_sn, 9, 13, ref.data(), kss.data(), qss.data()});
  for (std::int64_t N = 1; N < 9; ++N) {
    std::vector<double> dots(static_cast<std::size_t>(N * N));
    toporoute::simd::gram_generic(
        {big.k.data(), big.k_sn, big.q.data(), big.q_sn, N, 13, dots.data(), kss.data(), qss.data()});
    for (std::int64_t j = 0; j < N; ++j)
      for (std::int64_t i = 0; i < N; ++i)
        TOPOROUTE_CHECK(dots[static_cast<std::size_t>(j * N + i)] == ref[static_cast<std::size_t>(j * 9 + i)]);
  }
}

TOPOROUTE_TEST(generic_lanes_sum_pairwise) {
  using L = GenericLanes<4, 1, 4>;
  const L::V v{{1e16, 1.0, -1e16, 1.0}};
  TOPOROUTE_CHECK(L::hsum(v) == (1e16 + 1.0) + (-1e16 + 1.0));
  using L5 = GenericLanes<5, 1, 1>;
  const L5::V w{{1, 2, 3, 4, 5}};
  TOPOROUTE_CHECK(L5::hsum(w) == 15.0);
}

TOPOROUTE_TEST(gram_for_generic_is_the_generic_kernel) {
  TOPOROUTE_CHECK(toporoute::simd::gram_for(toporoute::Isa::generic) == toporoute::simd::gram_generic);
}

int main() { return toporoute::test::run_all(); }
