// HandoverServer: the agent's side of the memory-copy handover (docs/design/in-memory-checkpoints.md, 2.2).
// A SOCK_SEQPACKET Unix socket (MESHRUN_MEMORY in each worker) served by one thread for the agent's whole
// life, so copies outlive the workers that wrote them. Each worker says hello with its rank and the bytes a
// copy needs; it gets two slots (memfds) and then asks for one per copy (begin), says when it is sealed and
// when every rank sealed that step (commit). After a restart a worker asks for the plan (the committed steps
// this node holds for its rank) and opens the copy it restores. Stage 1: the node's own copies only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/unique_fd.hpp"
#include "launcher/memory/copy_shelf.hpp"
#include "launcher/memory/memfd_slot.hpp"

namespace meshrun::launcher {

class HandoverServer {
 public:
  /// Binds `socket_path` and starts serving. `slots_name` goes into each memfd's name (shown in /proc).
  HandoverServer(std::string socket_path, std::string slots_name);
  /// Stops the thread, closes every connection and frees every slot.
  ~HandoverServer();
  HandoverServer(const HandoverServer&) = delete;
  HandoverServer& operator=(const HandoverServer&) = delete;

  const std::string& socket_path() const { return socket_path_; }
  /// The committed steps held for `rank`, newest first.
  std::vector<int64_t> candidates(int rank) const;
  /// Bytes of every slot this agent holds.
  uint64_t held_bytes() const;

 private:
  struct Connection;
  struct RankSlots {
    uint64_t slot_bytes = 0;
    uint64_t digest = 0;
    std::vector<std::unique_ptr<MemfdSlot>> slots;
  };

  void serve();
  void accept_one();
  /// Handles one packet; false when the connection is to be closed.
  bool handle(Connection& c, const std::string& text);
  std::string on_hello(Connection& c, const nlohmann::json& hello, std::vector<int>& fds);
  std::string on_begin(const Connection& c, int64_t step);
  void on_sealed(const Connection& c, int slot, int64_t step);
  std::string on_open(const Connection& c, int64_t step, std::vector<int>& fds);
  void on_closed(Connection& c);

  std::string socket_path_;
  std::string slots_name_;
  UniqueFd listen_;
  UniqueFd wake_;  // eventfd: the destructor wakes the thread
  std::vector<std::unique_ptr<Connection>> connections_;
  mutable std::mutex mutex_;  // guards shelf_ and slots_ (the thread writes, candidates() reads)
  CopyShelf shelf_;
  std::map<int, RankSlots> slots_;
  std::thread thread_;
};

}  // namespace meshrun::launcher
