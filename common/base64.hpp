// Base64 (RFC 4648, standard alphabet, padded): etcd's JSON gateway carries keys and values this way.
#pragma once

#include <string>
#include <string_view>

namespace meshrun {

std::string base64_encode(std::string_view bytes);
/// Throws ProtocolError on a character outside the alphabet or a length that is not a multiple of 4.
std::string base64_decode(std::string_view text);

}  // namespace meshrun
