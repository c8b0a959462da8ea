// libFuzzer target: the daemon's store protocol with no socket (rendezvous/store_connection.hpp). Arbitrary
// bytes are cut into pieces and fed to two connections that share a store, as two clients' sockets would
// deliver them: parks, wakes, barriers, cancels, rendezvous awaits and malformed input must never crash, read
// out of bounds or leave a wait registered for a closed connection.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tests/support/local_connections.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  meshrun::proto::Limits limits;
  limits.max_key_bytes = 4096;
  limits.max_value_bytes = 1 << 16;
  limits.max_key_count = 256;
  limits.max_reply_backlog_bytes = 1024;
  meshrun::testing::LocalHost host(limits);
  const auto store = std::make_shared<meshrun::rendezvous::KvStore>();
  meshrun::testing::RecordingTransport transports[2];
  const std::shared_ptr<meshrun::rendezvous::StoreConnection> connections[2] = {host.connect(transports[0], store),
                                                                                host.connect(transports[1], store)};
  std::string_view input(reinterpret_cast<const char*>(data), size);
  // Each piece: a header byte (low 7 bits: its length; high bit: which connection), then that many bytes.
  while (!input.empty()) {
    const auto header = static_cast<uint8_t>(input.front());
    input.remove_prefix(1);
    const size_t length = std::min<size_t>(header & 0x7f, input.size());
    auto& connection = connections[header >> 7];
    auto& transport = transports[header >> 7];
    transport.unsent = transport.sent.size() % 3 == 0 ? 0 : 2048;  // a network that takes replies, or lags
    connection->receive(input.substr(0, length));
    input.remove_prefix(length);
    transport.unsent = 0;
    if (connection->wants_input()) connection->resume();
    for (const auto& waiting : host.awaiting) waiting->finish_await({{"status", "assigned"}});
    host.awaiting.clear();
  }
  for (const auto& connection : connections) connection->close("");
  if (host.parked() != 0) __builtin_trap();  // a closed connection's wait stays registered
  return 0;
}
