// Which wait a blocked thread's system call is, from /proc/<pid>/task/<tid>/syscall ("<number> <six arguments in
// hex> <sp> <pc>", or "running"): the numbers of this machine's architecture (x86-64 or AArch64), whether the call
// has a timeout, and where the descriptors it waits on are (an argument, a poll array, select's sets, an epoll).
// Pure; for wait_probe.hpp.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "launcher/activity/wait_probe.hpp"

namespace meshrun::launcher {

/// Where a call's descriptors are.
enum class FdSource {
  kNone,
  kFirstArgument,  // read, recv, accept, connect, write, send, ioctl, flock, fcntl: args[0]
  kPollArray,      // poll, ppoll: args[0] points to args[1] struct pollfd
  kSelectSets,     // select, pselect6: args[0] descriptors, the read and write sets at args[1] and args[2]
  kEpoll,          // epoll_wait, epoll_pwait, epoll_pwait2: the epoll descriptor args[0]
};

struct DecodedCall {
  WaitCall call = WaitCall::kUnknown;
  std::string name;  // "poll", or the number when this build does not know it
  bool timed = false;
  bool writing = false;
  FdSource fds = FdSource::kNone;
  int64_t child = -1;  // kChild: the child it waits for (-1: any)
  std::array<uint64_t, 6> args{};
};

/// The text of a syscall file; nullopt when it cannot be read as one.
std::optional<DecodedCall> decode_syscall_line(std::string_view line);

}  // namespace meshrun::launcher
