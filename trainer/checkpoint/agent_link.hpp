// AgentLink: a worker's end of its agent's memory handover socket (MESHRUN_MEMORY, a Unix SOCK_SEQPACKET
// socket; docs/design/in-memory-checkpoints.md, 2.2). One message of proto/worker/memory_handover.hpp per packet;
// slots (memfds) come back with the replies. The training thread and the copy's writer thread share it: a mutex keeps a
// request and its reply together, and one-way messages from the other thread wait for that round trip (microseconds).
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"
#include "proto/worker/memory_handover.hpp"

namespace meshrun::trainer {

/// A reply and the descriptors that came with it.
struct AgentReply {
  proto::HandoverReply message;
  std::vector<UniqueFd> fds;
};

class AgentLink {
 public:
  /// Connects to the socket at `path`; throws meshrun::Error naming it when that fails.
  explicit AgentLink(const std::string& path);

  /// Sends `message` and waits up to `timeout` for the reply. Throws meshrun::Error when the agent is gone,
  /// does not answer in time (the link is closed then: a late answer must not pass for the next one's) or
  /// answers with no reply this build reads.
  AgentReply request(const proto::HandoverRequest& message,
                     std::chrono::milliseconds timeout = std::chrono::seconds(10));
  /// Sends a message that has no reply (HandoverRequest::one_way()).
  void tell(const proto::HandoverRequest& message);

 private:
  std::string path_;
  UniqueFd socket_;
  std::mutex mutex_;
};

}  // namespace meshrun::trainer
