#include <catch2/catch.hpp>

#include "common/sha256.hpp"

TEST_CASE("SHA-256 matches FIPS 180-4's examples", "[sha256]") {
  CHECK(meshrun::to_hex(meshrun::sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(meshrun::to_hex(meshrun::sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(meshrun::to_hex(meshrun::sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(meshrun::to_hex(meshrun::sha256(std::string(1000000, 'a'))) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("HMAC-SHA-256 matches RFC 4231's test cases", "[sha256]") {
  CHECK(meshrun::to_hex(meshrun::hmac_sha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a key longer than the block is hashed first.
  CHECK(meshrun::to_hex(
            meshrun::hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST_CASE("constant-time comparison", "[sha256]") {
  CHECK(meshrun::equal_constant_time("abc", "abc"));
  CHECK_FALSE(meshrun::equal_constant_time("abc", "abd"));
  CHECK_FALSE(meshrun::equal_constant_time("abc", "abcd"));
}
