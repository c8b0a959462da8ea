#include <catch2/catch.hpp>

#include <string>

#include "common/poly1305.hpp"

namespace {

meshrun::Poly1305Key key_of(const std::string& hex) {
  meshrun::Poly1305Key key{};
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return key;
}

meshrun::Poly1305Key key_of_bytes(const std::string& bytes) {
  meshrun::Poly1305Key key{};
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(bytes[i]);
  return key;
}

std::string hex(const meshrun::Poly1305Tag& tag) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (const uint8_t b : tag) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

std::string tag_of(const meshrun::Poly1305Key& key, const std::string& message) {
  meshrun::Poly1305 mac(key);
  mac.update(message);
  return hex(mac.finish());
}

}  // namespace

TEST_CASE("Poly1305 matches RFC 8439's example", "[poly1305]") {
  const auto key = key_of("85d6be7857556d337f4452fe42d506a80103808afb0db2fd4abff6af4149f51b");
  CHECK(tag_of(key, "Cryptographic Forum Research Group") == "a8061dc1305136c6c22b8baf0c0127a9");
}

TEST_CASE("Poly1305 reduces at the edges of 2^130 - 5 (RFC 8439, appendix A.3)", "[poly1305]") {
  const std::string ff(16, '\xff');
  const std::string two = std::string(1, '\x02') + std::string(15, '\0');
  CHECK(tag_of(key_of_bytes(two + std::string(16, '\0')), ff) == "03000000000000000000000000000000");
  CHECK(tag_of(key_of_bytes(two + ff), two) == "03000000000000000000000000000000");
  const auto one = key_of_bytes(std::string(1, '\x01') + std::string(31, '\0'));
  CHECK(tag_of(one, ff + "\xf0" + std::string(15, '\xff') + "\x11" + std::string(15, '\0')) ==
        "05000000000000000000000000000000");
  CHECK(tag_of(one, ff + "\xfb" + std::string(15, '\xfe') + std::string(16, '\x01')) ==
        "00000000000000000000000000000000");
}

TEST_CASE("Poly1305 with every key bit set, against a big-integer reference", "[poly1305]") {
  // Expected tags computed by the textbook definition with Python's integers.
  const auto key = key_of_bytes(std::string(32, '\xff'));
  CHECK(tag_of(key, "") == "ffffffffffffffffffffffffffffffff");
  CHECK(tag_of(key, std::string(1000, '\xff')) == "de9406b10e7023bcd692ff687f4cbc7f");
}

TEST_CASE("Poly1305 gives the same tag however the bytes are split", "[poly1305]") {
  const auto key = key_of("85d6be7857556d337f4452fe42d506a80103808afb0db2fd4abff6af4149f51b");
  std::string message;
  for (int i = 0; i < 1000; ++i) message += static_cast<char>(i * 7 + 3);
  const std::string whole = tag_of(key, message);
  for (const size_t piece : {1, 3, 15, 16, 17, 100, 999}) {
    meshrun::Poly1305 mac(key);
    for (size_t at = 0; at < message.size(); at += piece) mac.update(message.substr(at, piece));
    CHECK(hex(mac.finish()) == whole);
  }
  message[500] ^= 1;
  CHECK(tag_of(key, message) != whole);
}
