#pragma once
// The bit toolkit of the graph kernels (toposort, bandit_select, dag_edit, dag_repair, team_project): u8 adjacency
// rows to and from 64-bit words, and a popcount that needs no POPCNT instruction. Unit tests: cpp/tests/.
#include <cstdint>
#include <cstring>

namespace toporoute::detail {

/// Bit i set when row[i * stride] != 0, for i in [0, n), n <= 64: one word. Contiguous rows go 8 bytes at a time
/// (little-endian): a SWAR step turns each non-zero byte into 0x01 and one multiply gathers the eight bits. The
/// word is gathered in a register and returned (an |= into memory per 8 bytes chains store-to-load forwarding:
/// it was most of the time of loading a small graph).
inline std::uint64_t row_bits(const std::uint8_t* row, std::int64_t stride, std::int64_t n) {
  std::uint64_t bits = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (stride == 1) {
    for (std::int64_t c = 0; c < n; c += 8) {
      std::uint64_t x = 0;
      if (c + 8 <= n) {
        std::memcpy(&x, row + c, 8);  // a fixed size: one load, never a call
      } else {
        for (std::int64_t i = c; i < n; ++i) x |= std::uint64_t{row[i]} << (8 * (i - c));
      }
      const std::uint64_t low7 = 0x7F7F7F7F7F7F7F7FULL;
      const std::uint64_t ones = (((((x & low7) + low7) | x) & ~low7) >> 7);
      bits |= ((ones * 0x0102040810204080ULL) >> 56) << c;
    }
    return bits;
  }
#endif
  for (std::int64_t i = 0; i < n; ++i) bits |= std::uint64_t{row[i * stride] != 0} << i;
  return bits;
}

/// Bits of row[i * stride] != 0 for i in [0, n) into ceil(n / 64) words (row_bits per word).
inline void load_bits(const std::uint8_t* row, std::int64_t stride, std::int64_t n, std::uint64_t* words) {
  for (std::int64_t begin = 0, w = 0; begin < n; begin += 64, ++w) {
    words[w] = row_bits(row + begin * stride, stride, n - begin < 64 ? n - begin : 64);
  }
}

/// Bytes 0 / 1 for the bits [0, n) of `words` (the inverse of load_bits into a contiguous row).
inline void store_bits(const std::uint64_t* words, std::int64_t n, std::uint8_t* out) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  for (std::int64_t c = 0; c < n; c += 8) {
    const std::uint64_t byte = (words[c >> 6] >> (c & 63)) & 0xFFu;
    const std::uint64_t spread = (byte * 0x0101010101010101ULL) & 0x8040201008040201ULL;
    const std::uint64_t ones = ((spread + 0x7F7F7F7F7F7F7F7FULL) & 0x8080808080808080ULL) >> 7;
    if (c + 8 <= n) {
      std::memcpy(out + c, &ones, 8);
    } else {
      for (std::int64_t i = c; i < n; ++i) out[i] = static_cast<std::uint8_t>(ones >> (8 * (i - c)));
    }
  }
#else
  for (std::int64_t i = 0; i < n; ++i) out[i] = (words[i >> 6] >> (i & 63)) & 1u;
#endif
}

/// Number of set bits. SWAR: the baseline x86-64 target has no POPCNT, and __builtin_popcountll would call
/// libgcc.
inline std::int64_t popcount64(std::uint64_t x) {
  x -= (x >> 1) & 0x5555555555555555ULL;
  x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
  x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0FULL;
  return static_cast<std::int64_t>((x * 0x0101010101010101ULL) >> 56);
}

}  // namespace toporoute::detail
