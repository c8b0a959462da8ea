// Checkpoint CRCs: whichever implementation the build chose (ISA-L or zlib), the values are zlib's (the ones
// Python's zlib.crc32 computes and metadata.json stores), for every length, alignment and chaining.
#include <zlib.h>

#include <cstdint>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "trainer/checkpoint/atomic_file.hpp"

using meshrun::trainer::crc32_of;

namespace {
uint32_t zlib_crc(const unsigned char* p, size_t n, uint32_t crc) {
  return static_cast<uint32_t>(::crc32(crc, p, static_cast<uInt>(n)));
}
}  // namespace

TEST_CASE("crc32_of equals zlib's CRC-32 for every length, alignment and chaining", "[trainer][crc]") {
  std::mt19937 rng(42);
  std::vector<unsigned char> data(1 << 20);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  CHECK(crc32_of(data.data(), 0) == 0);
  // The check value of the standard: CRC-32 of "123456789".
  CHECK(crc32_of("123456789", 9) == 0xCBF43926u);
  for (size_t length : {1u, 3u, 15u, 16u, 17u, 63u, 64u, 65u, 255u, 256u, 4095u, 65537u, 1u << 20}) {
    for (size_t offset : {0u, 1u, 7u}) {
      const size_t n = std::min(length, data.size() - offset);
      INFO("length " << n << " offset " << offset);
      CHECK(crc32_of(data.data() + offset, n) == zlib_crc(data.data() + offset, n, 0));
      // Chained in two pieces, from a non-zero start, as the shard writer continues a chunk's CRC.
      const size_t half = n / 2;
      const uint32_t start = 0x12345678u;
      CHECK(crc32_of(data.data() + offset + half, n - half, crc32_of(data.data() + offset, half, start)) ==
            zlib_crc(data.data() + offset, n, start));
    }
  }
}
