#include <catch2/catch.hpp>

#include "common/base64.hpp"
#include "common/error.hpp"

TEST_CASE("base64 matches RFC 4648's test vectors both ways", "[base64]") {
  const std::vector<std::pair<std::string, std::string>> vectors{{"", ""},
                                                                 {"f", "Zg=="},
                                                                 {"fo", "Zm8="},
                                                                 {"foo", "Zm9v"},
                                                                 {"foob", "Zm9vYg=="},
                                                                 {"fooba", "Zm9vYmE="},
                                                                 {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    CHECK(meshrun::base64_encode(plain) == encoded);
    CHECK(meshrun::base64_decode(encoded) == plain);
  }
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  CHECK(meshrun::base64_decode(meshrun::base64_encode(all)) == all);
}

TEST_CASE("base64 refuses text that is not base64", "[base64]") {
  CHECK_THROWS_AS(meshrun::base64_decode("Zm9"), meshrun::ProtocolError);
  CHECK_THROWS_AS(meshrun::base64_decode("Zm*v"), meshrun::ProtocolError);
  CHECK_THROWS_AS(meshrun::base64_decode("Z=9v"), meshrun::ProtocolError);
}
