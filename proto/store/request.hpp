// Request: one decoded TCPStore (or MESHRUN) query, and the incremental decoder the daemon feeds with
// whatever bytes have arrived. Decoding is all-or-nothing: a partial message consumes nothing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "proto/store/tcpstore_protocol.hpp"

namespace meshrun::proto {

struct Request {
  QueryType type = QueryType::kValidate;
  std::vector<std::string> keys;    // key(s) of the query
  std::vector<std::string> values;  // value / expected+desired / payload (MESHRUN: the JSON text)
  int64_t number = 0;               // ADD delta, PING nonce, VALIDATE magic, BARRIER world size
};

enum class DecodeStatus { kComplete, kNeedMore, kMalformed };

struct DecodeResult {
  DecodeStatus status = DecodeStatus::kNeedMore;
  size_t consumed = 0;  // bytes of the complete message
  std::string error;    // why it is malformed
};

/// Decodes one request from the front of `buffer` into `out`.
DecodeResult decode_request(std::string_view buffer, const Limits& limits, Request& out);

/// Encodes a request as a client sends it (used by our client and by tests).
std::string encode_request(const Request& request);

}  // namespace meshrun::proto
