// What each thread of a rank's process tree is blocked on, read from /proc when the others wait for an idle
// rank (docs/progress.md, "Late or hung"): each task's state, the system call it sleeps in
// (/proc/<pid>/task/<tid>/syscall, decoded for this machine's architecture) and how long ago it last ran
// (sched), and for a call on descriptors, what each one is: a TCP or UDP socket with its addresses and the
// holders of its other end on this host, a Unix socket and its peer's holders, a pipe and who else holds it,
// a terminal, a file. The result is plain data, judged by wait_rule.hpp (pure); tests/launcher/wait_samples/
// holds recorded ones. Reading it is a few small files per thread and descriptor, plus one pass over every
// process's descriptors to find who holds the other ends: done once per hang inquiry, never per sample.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace meshrun::launcher {

/// What a thread's system call waits for.
enum class WaitCall {
  kRunning,      // not in a system call: it computes (or was between two)
  kSleep,        // nanosleep, clock_nanosleep, or poll/select on no descriptor: time alone ends it
  kDescriptors,  // read, recv, accept, connect, write, send, poll, select, epoll: its descriptors say on what
  kChild,        // wait4, waitid: a child process
  kLock,         // futex: a lock, an event or a queue of its own process
  kSignal,       // pause, sigsuspend, sigtimedwait: a signal
  kFileLock,     // flock, fcntl(F_SETLKW): a lock on a file
  kDevice,       // ioctl: a device (the GPU's driver)
  kOther,        // another call
  kUnknown,      // not readable (permissions, the thread is gone)
};

/// What a descriptor is.
enum class FdKind {
  kTcp,          // a connected (or connecting) TCP socket
  kTcpListen,    // a listening TCP socket
  kUdp,          // a UDP socket
  kUnix,         // a Unix socket
  kOtherSocket,  // a socket of another family (netlink...)
  kPipe,         // an anonymous pipe
  kFifo,         // a named pipe
  kTerminal,     // a terminal (/dev/pts/N, /dev/ttyN)
  kDevice,       // another character device (/dev/nvidia0...)
  kFile,         // a regular file or a directory
  kEventFd,      // anon_inode:[eventfd]: set by a thread of the process
  kTimerFd,      // anon_inode:[timerfd]: time
  kSignalFd,     // anon_inode:[signalfd]
  kInotify,      // anon_inode:inotify: changes to files
  kEpoll,        // anon_inode:[eventpoll]: the descriptors in `targets`
  kOther,
};

std::string_view to_string(WaitCall value);
std::string_view to_string(FdKind value);

/// A process that holds the other end of a socket or pipe (or the same pipe), on this host.
struct FdHolder {
  pid_t pid = 0;
  bool writes = false;  // pipes: it holds the write end
  std::string command;  // its command line, short

  bool operator==(const FdHolder&) const = default;
};

struct FdTarget {
  int fd = -1;
  FdKind kind = FdKind::kOther;
  uint64_t inode = 0;
  std::string local;            // sockets: "127.0.0.1:5000"; files, pipes by name, terminals, devices: the path
  std::string remote;           // TCP and UDP: the peer's "address:port" ("" when not connected)
  bool connecting = false;      // TCP: SYN sent, no answer yet
  std::vector<FdHolder> peers;  // the other end's holders on this host: the TCP peer socket's, the Unix peer's,
                                // the pipe's other holders (this process excluded); empty when none was found
  bool peers_known = false;     // the holders were looked for (a remote host's socket: not)
  std::vector<int> targets;     // kEpoll: the descriptors it watches

  bool operator==(const FdTarget&) const = default;
};

struct ThreadWait {
  pid_t tid = 0;
  std::string name;  // comm
  char state = '\0';
  WaitCall call = WaitCall::kUnknown;
  std::string syscall;   // its name ("poll", "futex"), or the number
  bool timed = false;    // the call has a timeout
  bool writing = false;  // kDescriptors: it waits to write, not to read
  std::vector<int> fds;  // kDescriptors: the descriptors it waits on (empty: not known)
  pid_t child = -1;      // kChild: the child it waits for (-1: any)
  double idle_s = -1;    // how long ago it last ran (-1: not known)

  bool operator==(const ThreadWait&) const = default;
};

struct ProcessWaits {
  pid_t pid = 0;
  pid_t parent = 0;
  std::string command;                 // its command line, short
  std::vector<ThreadWait> threads;     // the main thread first
  std::map<int, FdTarget> fds;         // the descriptors some thread waits on (and what their epolls watch)
  std::vector<std::string> listening;  // its listening TCP sockets' "address:port"

  bool operator==(const ProcessWaits&) const = default;
};

struct TreeWaits {
  std::vector<ProcessWaits> processes;  // [0]: the worker, then its descendants; empty: it is gone
  int64_t read_at_unix_ms = 0;

  bool operator==(const TreeWaits&) const = default;
};

/// Reads `leader`'s tree under `proc_root` ("/proc" in production). Memory reads (the descriptors of a poll or a
/// select) and Unix peers (sock_diag) are asked of the live kernel only when `proc_root` is "/proc".
TreeWaits read_tree_waits(const std::string& proc_root, pid_t leader);

/// "ls -l"'s view of a descriptor's link text ("socket:[123]", "pipe:[9]", "/dev/pts/0", "anon_inode:[eventfd]").
FdKind kind_of_link(const std::string& link, uint64_t& inode);

/// A process's command line, with an absolute path's last component only ("python outside_world.py service port
/// 90"), cut to `max` characters.
std::string short_command(const std::string& proc_root, pid_t pid, size_t max = 80);

void to_json(nlohmann::json& j, const FdHolder& h);
void from_json(const nlohmann::json& j, FdHolder& h);
void to_json(nlohmann::json& j, const FdTarget& t);
void from_json(const nlohmann::json& j, FdTarget& t);
void to_json(nlohmann::json& j, const ThreadWait& t);
void from_json(const nlohmann::json& j, ThreadWait& t);
void to_json(nlohmann::json& j, const ProcessWaits& p);
void from_json(const nlohmann::json& j, ProcessWaits& p);
void to_json(nlohmann::json& j, const TreeWaits& t);
void from_json(const nlohmann::json& j, TreeWaits& t);

}  // namespace meshrun::launcher
