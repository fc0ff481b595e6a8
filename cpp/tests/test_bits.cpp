// Unit tests of cpp/src/bits.hpp against plain loops: every row length 0..200, unit and wider strides, any
// non-zero byte value, and the round trip through store_bits.
#include <cstdint>
#include <random>
#include <vector>

#include "../src/bits.hpp"
#include "check.hpp"

namespace {

using toporoute::detail::load_bits;
using toporoute::detail::popcount64;
using toporoute::detail::row_bits;
using toporoute::detail::store_bits;

std::uint64_t naive_word(const std::uint8_t* row, std::int64_t stride, std::int64_t n) {
  std::uint64_t bits = 0;
  for (std::int64_t i = 0; i < n; ++i) bits |= std::uint64_t{row[i * stride] != 0} << i;
  return bits;
}

// bytes with every value 0..255 in random places, about half of them zero
std::vector<std::uint8_t> random_row(std::mt19937_64& rng, std::size_t size) {
  std::vector<std::uint8_t> row(size);
  for (auto& b : row) b = (rng() & 1) ? static_cast<std::uint8_t>(rng()) : 0;
  return row;
}

}  // namespace

TOPOROUTE_TEST(row_bits_matches_a_plain_loop) {
  std::mt19937_64 rng(1);
  for (std::int64_t stride : {1, 2, 3, 8}) {
    for (std::int64_t n = 0; n <= 64; ++n) {
      const auto row = random_row(rng, static_cast<std::size_t>(n * stride + 8));
      TOPOROUTE_CHECK_EQ(row_bits(row.data(), stride, n), naive_word(row.data(), stride, n));
    }
  }
}

TOPOROUTE_TEST(row_bits_reads_no_byte_past_n) {
  // the bytes after the row are non-zero: they must not show up in the word
  for (std::int64_t n = 0; n <= 64; ++n) {
    std::vector<std::uint8_t> row(static_cast<std::size_t>(n) + 16, 0xFF);
    for (std::int64_t i = 0; i < n; ++i) row[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i % 2);
    TOPOROUTE_CHECK_EQ(row_bits(row.data(), 1, n), naive_word(row.data(), 1, n));
  }
}

TOPOROUTE_TEST(every_byte_value_counts_as_its_truth) {
  for (int v = 0; v < 256; ++v) {
    std::uint8_t row[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    row[v % 8] = static_cast<std::uint8_t>(v);
    TOPOROUTE_CHECK_EQ(row_bits(row, 1, 8), v == 0 ? std::uint64_t{0} : std::uint64_t{1} << (v % 8));
  }
}

TOPOROUTE_TEST(load_and_store_round_trip_over_several_words) {
  std::mt19937_64 rng(2);
  for (std::int64_t n = 0; n <= 200; ++n) {
    const auto row = random_row(rng, static_cast<std::size_t>(n));
    std::vector<std::uint64_t> words(static_cast<std::size_t>((n + 63) / 64) + 1, ~std::uint64_t{0});
    load_bits(row.data(), 1, n, words.data());
    for (std::int64_t w = 0; w * 64 < n; ++w) {
      const std::int64_t len = n - w * 64 < 64 ? n - w * 64 : 64;
      TOPOROUTE_CHECK_EQ(words[static_cast<std::size_t>(w)], naive_word(row.data() + w * 64, 1, len));
    }
    TOPOROUTE_CHECK_EQ(words.back(), ~std::uint64_t{0});  // no word written past ceil(n / 64)
    std::vector<std::uint8_t> back(static_cast<std::size_t>(n) + 8, 7);
    store_bits(words.data(), n, back.data());
    for (std::int64_t i = 0; i < n; ++i) {
      TOPOROUTE_CHECK_EQ(int{back[static_cast<std::size_t>(i)]}, int{row[static_cast<std::size_t>(i)] != 0});
    }
    TOPOROUTE_CHECK_EQ(int{back[static_cast<std::size_t>(n)]}, 7);  // no byte written past n
  }
}

TOPOROUTE_TEST(popcount_matches_a_plain_count) {
  std::mt19937_64 rng(3);
  for (int t = 0; t < 10000; ++t) {
    const std::uint64_t x = t < 65 ? (t == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << t) - 1) : rng();
    std::int64_t want = 0;
    for (int i = 0; i < 64; ++i) want += (x >> i) & 1;
    TOPOROUTE_CHECK_EQ(popcount64(x), want);
  }
}

int main() { return toporoute::test::run_all(); }
