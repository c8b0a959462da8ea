// The reply layouts (proto/store/reply.hpp): each encoder's bytes, and the matching decoder reading them back.
#include <catch2/catch.hpp>
#include <cstring>

#include "common/error.hpp"
#include "proto/store/reply.hpp"

using namespace meshrun;
using namespace meshrun::proto;

namespace {
// Reads from a byte string as the client reads from its socket; running out is an error.
struct BufferSource {
  explicit BufferSource(std::string b) : bytes(std::move(b)) {}
  void read_exact(void* data, size_t size) {
    if (bytes.size() - pos < size) throw NetworkError("short reply");
    std::memcpy(data, bytes.data() + pos, size);
    pos += size;
  }
  std::string peer() const { return "buffer"; }
  bool done() const { return pos == bytes.size(); }
  std::string bytes;
  size_t pos = 0;
};

std::string le64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), sizeof v); }
}  // namespace

TEST_CASE("reply encoders write the TCPStore layouts", "[codec][reply]") {
  CHECK(encode_status(CheckResponse::kNotReady) == std::string(1, '\x01'));
  CHECK(encode_status(WaitResponse::kStopWaiting) == std::string(1, '\x00'));
  CHECK(encode_nonce(0x01020304) == std::string("\x04\x03\x02\x01", 4));
  CHECK(encode_int64(-2) == le64(static_cast<uint64_t>(-2)));
  CHECK(encode_string("ab") == le64(2) + "ab");
  CHECK(encode_strings({"a", ""}) == le64(1) + "a" + le64(0));
  CHECK(encode_string_list({"k"}) == le64(1) + le64(1) + "k");
  CHECK(encode_queue_pop(0, std::nullopt) == le64(0));
  CHECK(encode_queue_pop(3, std::string("v")) == le64(3) + le64(1) + "v");
}

TEST_CASE("reply decoders read back what the encoders wrote", "[codec][reply]") {
  BufferSource in(encode_status(WaitResponse::kWaitCanceled) + encode_nonce(77) + encode_int64(-5) +
                  encode_string("value") + encode_strings({"x", "yz"}) + encode_string_list({"a", "b", "c"}) +
                  encode_queue_pop(2, std::string("head")) + encode_queue_pop(0, std::nullopt));
  CHECK(decode_status<WaitResponse>(in) == WaitResponse::kWaitCanceled);
  CHECK(decode_nonce(in) == 77);
  CHECK(decode_int64(in) == -5);
  CHECK(decode_string(in) == "value");
  CHECK(decode_strings(in, 2) == std::vector<std::string>{"x", "yz"});
  CHECK(decode_string_list(in) == std::vector<std::string>{"a", "b", "c"});
  CHECK(decode_queue_pop(in) == std::optional<std::string>("head"));
  CHECK(decode_queue_pop(in) == std::nullopt);
  CHECK(in.done());
}

TEST_CASE("a reply string of implausible length is a protocol error naming the peer", "[codec][reply]") {
  BufferSource in(le64(kMaxReplyStringBytes + 1));
  CHECK_THROWS_MATCHES(decode_string(in), ProtocolError, Catch::Message("implausible string length from buffer"));
}
