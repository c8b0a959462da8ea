// The TCPStore wire vocabulary, as PyTorch's c10d TCPStore client speaks it, plus meshrun's one extension.
//
// Framing (all integers in host byte order, which is little-endian on every platform we build for):
//   request  := u8 query_type, then the fields of that query
//   string   := u64 length, then that many bytes         (keys, values, payloads)
//   vector   := u64 count, then `count` strings           (MULTI_GET / MULTI_SET / CHECK / WAIT keys)
//   int64    := 8 bytes, two's complement                 (ADD deltas and results, counts)
// A connection starts with VALIDATE carrying kValidationMagic; the server sends no reply to it.
// Every other query's reply is listed next to it below (reply.hpp encodes and decodes them). MESHRUN
// (0x40) carries a JSON document for the rendezvous and answers with one; a real TCPStore server would
// just drop a client that sends it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace meshrun::proto {

inline constexpr uint32_t kValidationMagic = 0x3C85F7CE;

enum class QueryType : uint8_t {
  kValidate = 0,  // u32 magic                          -> (nothing)
  kSet = 1,       // key, value                         -> (nothing)
  // COMPARE_SET: key, expected, desired -> the value now stored (`expected` if the key is absent and
  // `expected` is non-empty).
  kCompareSet = 2,
  kGet = 3,          // key                                -> value ("" when absent; clients WAIT first)
  kAdd = 4,          // key, int64 delta                   -> int64 new value
  kCheck = 5,        // vector keys                        -> u8 CheckResponse
  kWait = 6,         // vector keys                        -> u8 WaitResponse::kStopWaiting when all exist
  kGetNumKeys = 7,   //                                    -> int64
  kDeleteKey = 8,    // key                                -> int64 number of keys deleted
  kAppend = 9,       // key, value                         -> (nothing)
  kMultiGet = 10,    // vector keys                        -> one string per key
  kMultiSet = 11,    // u64 n, then n (key, value) pairs   -> (nothing)
                     // NOTE: PyTorch's C++ client prefixes every user key with "/" (except "init/").
  kCancelWait = 12,  //                                    -> u8 WaitResponse::kWaitCanceled
  kPing = 13,        // u32 nonce                          -> u32 nonce
  kQueuePush = 14,   // key, value                         -> (nothing)
  kQueuePop = 15,    // key                                -> int64 length before pop, then value if it was > 0
  kQueueLen = 16,    // key                                -> int64
  kListKeys = 17,    //                                    -> vector of keys
  kBarrier = 18,     // key, int64 world size              -> u8 kStopWaiting once `world size` callers arrived
  kMeshrun = 0x40,   // string JSON request                -> string JSON response
};

enum class CheckResponse : uint8_t { kReady = 0, kNotReady = 1 };
enum class WaitResponse : uint8_t { kStopWaiting = 0, kWaitCanceled = 1 };

/// Size limits the daemon enforces before allocating; a request over them closes that connection.
// PyTorch's libuv server caps keys at 8 KiB, values at 8 MiB and key counts at 128 Ki.
struct Limits {
  size_t max_key_bytes = 64 * 1024;           // one key
  size_t max_value_bytes = 64 * 1024 * 1024;  // one value; --max-message-bytes overrides
  // Keys in one CHECK/WAIT/MULTI_* request: what the byte caps already bound (each key costs at least
  // its 8-byte length); PyTorch's clients send one per rank, 100k and more.
  size_t max_key_count = 64 * 1024 * 1024 / 8;
  // Replies queued for a client that does not read them: past this the daemon stops reading (and
  // answering) that client until it drains, so one client cannot grow the daemon's memory without bound.
  size_t max_reply_backlog_bytes = 64 * 1024 * 1024;
  // Connections from one address at once: past it a new one is closed at once, so one client cannot take
  // every descriptor. A node's agent and workers hold tens; the connect-storm bench 4,096 per source address,
  // the rendezvous bench 10,000 from one. 0: no cap (--max-connections-per-peer).
  size_t max_connections_per_peer = 16384;
  // Keys named by one address's parked WAITs at once, over all its connections (the wait registry holds each):
  // a WAIT past it closes that connection. PyTorch waits on a rank's keys, at most the world's (0: no cap).
  size_t max_waited_keys_per_peer = size_t{1} << 20;
};

/// Returns the lowercase name of a query type ("set", "compare_set"...), or nullptr when unknown.
const char* query_name(uint8_t type);

}  // namespace meshrun::proto
