// SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104): the join token's challenge-response needs a keyed
// hash and nothing else, so no crypto library is linked for it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace meshrun {

using Sha256Digest = std::array<uint8_t, 32>;

Sha256Digest sha256(std::string_view data);
Sha256Digest hmac_sha256(std::string_view key, std::string_view message);
/// Lower-case hex of a digest.
std::string to_hex(const Sha256Digest& digest);
/// Compares in time independent of where the texts differ (for secrets and proofs).
bool equal_constant_time(std::string_view a, std::string_view b);

}  // namespace meshrun
