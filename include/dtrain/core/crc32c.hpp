#pragma once
/// \file
/// CRC-32C (Castagnoli, as iSCSI, ext4 and TFRecord files use it): the ring's frame checksum (TCP's
/// own 16-bit sum misses what a faulty NIC, cable or middlebox can do to a frame) and the TFRecord
/// framing of TensorBoard's event files and of TFRecord files (masked_crc32c).
///
/// `crc32c(data, n, crc)` continues from `crc`. The table form (a byte at a time) is the reference.
/// Where the CPU has SSE 4.2, its crc32 instruction takes 8 bytes, and three independent streams over
/// three blocks keep it busy (its latency is three times its throughput); the three CRCs are then
/// joined by shifting each over the blocks after it, a linear map precomputed per block length
/// (zeros_table, after Mark Adler's crc32c.c).

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace dtrain::detail {

/// The reference: a byte at a time.
inline std::uint32_t crc32c_bytes(const unsigned char* p, std::size_t n, std::uint32_t crc) {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = ~crc;
  for (; n > 0; ++p, --n) c = table[(c ^ *p) & 0xff] ^ (c >> 8);
  return ~c;
}

/// The linear map "append `bytes` zero bytes" on a raw CRC-32C register, as four byte tables.
using crc_shift = std::array<std::array<std::uint32_t, 256>, 4>;
inline crc_shift zeros_table(std::size_t bytes) {  // bytes: a power of two, at least 1
  using matrix = std::array<std::uint32_t, 32>;
  auto times = [](const matrix& m, std::uint32_t v) {
    std::uint32_t sum = 0;
    for (int i = 0; v; v >>= 1, ++i)
      if (v & 1) sum ^= m[std::size_t(i)];
    return sum;
  };
  auto square = [&](const matrix& m) {
    matrix r{};
    for (std::size_t i = 0; i < 32; ++i) r[i] = times(m, m[i]);
    return r;
  };
  matrix op{};  // one zero bit
  op[0] = 0x82f63b78u;
  for (std::size_t i = 1; i < 32; ++i) op[i] = 1u << (i - 1);
  for (std::size_t bits = 1; bits < 8 * bytes; bits *= 2) op = square(op);
  crc_shift t{};
  for (std::uint32_t b = 0; b < 256; ++b)
    for (std::size_t k = 0; k < 4; ++k) t[k][b] = times(op, b << (8 * k));
  return t;
}
inline std::uint32_t shifted(const crc_shift& t, std::uint32_t c) {
  return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) inline std::uint32_t crc32c_sse42(const unsigned char* p, std::size_t n, std::uint32_t crc) {
  constexpr std::size_t block = 4096;  // per stream
  static const crc_shift over_block = zeros_table(block);
  auto word = [](const unsigned char* q) {
    std::uint64_t v;
    std::memcpy(&v, q, 8);
    return v;
  };
  std::uint64_t c0 = ~crc;
  for (; n >= 3 * block; p += 3 * block, n -= 3 * block) {
    std::uint64_t c1 = 0, c2 = 0;
    for (std::size_t i = 0; i < block; i += 8) {
      c0 = __builtin_ia32_crc32di(c0, word(p + i));
      c1 = __builtin_ia32_crc32di(c1, word(p + block + i));
      c2 = __builtin_ia32_crc32di(c2, word(p + 2 * block + i));
    }
    c0 = shifted(over_block, std::uint32_t(c0)) ^ std::uint32_t(c1);
    c0 = shifted(over_block, std::uint32_t(c0)) ^ std::uint32_t(c2);
  }
  for (; n >= 8; p += 8, n -= 8) c0 = __builtin_ia32_crc32di(c0, word(p));
  auto c = std::uint32_t(c0);
  for (; n > 0; ++p, --n) c = __builtin_ia32_crc32qi(c, *p);
  return ~c;
}
#endif

inline std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc = 0) {
  const auto* p = static_cast<const unsigned char*>(data);
#if defined(__x86_64__)
  static const bool hardware = __builtin_cpu_supports("sse4.2");
  if (hardware) return crc32c_sse42(p, n, crc);
#endif
  return crc32c_bytes(p, n, crc);
}

/// TFRecord's masked CRC-32C (a CRC of data that holds CRCs is otherwise weak): TensorBoard's event
/// files and TFRecord files frame their records with it.
inline std::uint32_t masked_crc32c(const void* data, std::size_t n) {
  const std::uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

}  // namespace dtrain::detail
