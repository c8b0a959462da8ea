// libFuzzer target: arbitrary bytes into the daemon's request decoder, in the chunking a socket may
// deliver. The decoder must never crash, read out of bounds or allocate past its limits.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "proto/store/request.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  meshrun::proto::Limits limits;
  limits.max_key_bytes = 4096;
  limits.max_value_bytes = 1 << 20;
  limits.max_key_count = 1024;
  std::string_view buffer(reinterpret_cast<const char*>(data), size);
  // Decode requests back to back, as the daemon does with a connection's buffered bytes.
  while (!buffer.empty()) {
    meshrun::proto::Request request;
    const auto result = meshrun::proto::decode_request(buffer, limits, request);
    if (result.status != meshrun::proto::DecodeStatus::kComplete) break;
    if (result.consumed == 0 || result.consumed > buffer.size()) __builtin_trap();
    // What decodes must encode back to the same bytes.
    if (meshrun::proto::encode_request(request) != buffer.substr(0, result.consumed)) __builtin_trap();
    buffer.remove_prefix(result.consumed);
  }
  return 0;
}
