// How much memory a node's agent may still take for copies in memory (docs/checkpoints.md, "Copies in
// memory"): the kernel's MemAvailable, and for the agent's cgroup and each ancestor with a limit, what is
// left under it (v2's memory.max, v1's memory.limit_in_bytes). Half of it is kept for training (activations not
// allocated yet when the first copy is asked for), and the copies are refused beyond that: a memfd filled past a
// cgroup's limit does not fail, the OOM killer ends the agent. Pure, with the file reads injected.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace meshrun::launcher {

/// A file's text, or nothing when it cannot be read (tests pass fake /proc and /sys files).
using ReadText = std::function<std::optional<std::string>(const std::string& path)>;

/// The bytes this node may still use, and what bounds them, for messages.
struct MemoryRoom {
  uint64_t bytes = 0;
  std::string bound;   // "MemAvailable", "cgroup /job memory.max 1.5 GiB"
  bool known = false;  // nothing could be read: no check
};

MemoryRoom memory_room(const ReadText& read);
/// Why `need` more bytes may not be taken; "" when they may (at most half the room).
[[nodiscard]] std::string budget_refusal(uint64_t need, const MemoryRoom& room);
/// The real files.
std::optional<std::string> read_text_file(const std::string& path);

}  // namespace meshrun::launcher
