// libFuzzer target: arbitrary bytes as what a peer sends the agents' copy port (launcher/memory/): the agent's
// side reads them as a request frame (uint32 length, then JSON) and checks its proof of the run's secret. A
// stranger's bytes must never crash the agent, make it read past a frame's limit, or pass the proof. The same
// bytes are also read as a memory handover packet both ways (proto/worker/memory_handover.hpp): a typed message or a
// ProtocolError, nothing else.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/error.hpp"
#include "common/unique_fd.hpp"
#include "launcher/memory/peer_auth.hpp"
#include "launcher/memory/peer_link.hpp"
#include "proto/worker/memory_handover.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view packet(reinterpret_cast<const char*>(data), size);
  try {
    meshrun::proto::parse_handover_request(packet);
  } catch (const meshrun::ProtocolError&) {}
  try {
    meshrun::proto::parse_handover_reply(packet);
  } catch (const meshrun::ProtocolError&) {}
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return 0;
  const meshrun::UniqueFd agent(pair[0]), peer(pair[1]);
  meshrun::launcher::set_peer_deadlines(agent.get());
  // The peer's whole stream, then its end: the agent reads no more than what was sent.
  if (size > 0 && ::write(peer.get(), data, size) != static_cast<ssize_t>(size)) return 0;
  ::shutdown(peer.get(), SHUT_WR);
  try {
    if (meshrun::launcher::accept_peer_request(agent.get(), "the run's secret", "10.0.0.1:4242"))
      __builtin_trap();  // no proof passes
  } catch (const std::exception&) {}
  return 0;
}
