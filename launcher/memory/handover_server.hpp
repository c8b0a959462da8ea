// HandoverServer: the agent's side of the workers' memory-copy socket (MESHRUN_MEMORY, a Unix SOCK_SEQPACKET
// socket; docs/design/in-memory-checkpoints.md, 2.2), served by one thread for the agent's whole life. One
// request per packet (proto/worker/memory_handover.hpp); the MemoryKeeper answers it (slots travel as descriptors). A
// worker that goes away mid-copy is seen at once (the connection's end), so its slot is torn, never kept.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.hpp"
#include "proto/worker/memory_handover.hpp"

namespace meshrun::launcher {

class MemoryKeeper;

class HandoverServer {
 public:
  /// Binds `socket_path` and starts serving `keeper`'s requests.
  HandoverServer(std::string socket_path, MemoryKeeper& keeper);
  /// Stops the thread and closes every connection.
  ~HandoverServer();
  HandoverServer(const HandoverServer&) = delete;
  HandoverServer& operator=(const HandoverServer&) = delete;

 private:
  struct Connection;

  void serve();
  void accept_one();
  /// Handles one packet; false when the connection is to be closed.
  bool handle(Connection& c, const std::string& text);
  /// The keeper's answer to `request`; nullopt for a one-way request. `fds`: the descriptors to send with it.
  std::optional<proto::HandoverReply> answer(Connection& c, const proto::HandoverRequest& request,
                                             std::vector<int>& fds);
  void on_closed(Connection& c);

  std::string socket_path_;
  MemoryKeeper& keeper_;
  UniqueFd listen_;
  UniqueFd wake_;  // eventfd: the destructor wakes the thread
  std::vector<std::unique_ptr<Connection>> connections_;
  uint64_t connections_made_ = 0;
  std::thread thread_;
};

}  // namespace meshrun::launcher
