#include "launcher/activity/wait_call.hpp"

#include <fcntl.h>
#include <sys/file.h>

#include <charconv>
#include <sstream>
#include <vector>

namespace meshrun::launcher {
namespace {

// The calls a blocked thread is found in, by name: each architecture's numbers below map to these.
enum class Sys {
  kRead,
  kWrite,
  kReadv,
  kWritev,
  kPread,
  kPreadv,
  kRecvfrom,
  kRecvmsg,
  kRecvmmsg,
  kSendto,
  kSendmsg,
  kAccept,
  kAccept4,
  kConnect,
  kPoll,
  kPpoll,
  kSelect,
  kPselect6,
  kEpollWait,
  kEpollPwait,
  kEpollPwait2,
  kNanosleep,
  kClockNanosleep,
  kFutex,
  kFutexWaitv,
  kWait4,
  kWaitid,
  kPause,
  kRtSigsuspend,
  kRtSigtimedwait,
  kFlock,
  kFcntl,
  kIoctl,
};

struct Known {
  long number;
  Sys sys;
  const char* name;
};

#if defined(__x86_64__)
constexpr Known kCalls[] = {
    {0, Sys::kRead, "read"},
    {1, Sys::kWrite, "write"},
    {7, Sys::kPoll, "poll"},
    {16, Sys::kIoctl, "ioctl"},
    {17, Sys::kPread, "pread64"},
    {19, Sys::kReadv, "readv"},
    {20, Sys::kWritev, "writev"},
    {23, Sys::kSelect, "select"},
    {34, Sys::kPause, "pause"},
    {35, Sys::kNanosleep, "nanosleep"},
    {42, Sys::kConnect, "connect"},
    {43, Sys::kAccept, "accept"},
    {44, Sys::kSendto, "sendto"},
    {45, Sys::kRecvfrom, "recvfrom"},
    {46, Sys::kSendmsg, "sendmsg"},
    {47, Sys::kRecvmsg, "recvmsg"},
    {61, Sys::kWait4, "wait4"},
    {72, Sys::kFcntl, "fcntl"},
    {73, Sys::kFlock, "flock"},
    {128, Sys::kRtSigtimedwait, "rt_sigtimedwait"},
    {130, Sys::kRtSigsuspend, "rt_sigsuspend"},
    {202, Sys::kFutex, "futex"},
    {230, Sys::kClockNanosleep, "clock_nanosleep"},
    {232, Sys::kEpollWait, "epoll_wait"},
    {247, Sys::kWaitid, "waitid"},
    {270, Sys::kPselect6, "pselect6"},
    {271, Sys::kPpoll, "ppoll"},
    {281, Sys::kEpollPwait, "epoll_pwait"},
    {288, Sys::kAccept4, "accept4"},
    {295, Sys::kPreadv, "preadv"},
    {299, Sys::kRecvmmsg, "recvmmsg"},
    {441, Sys::kEpollPwait2, "epoll_pwait2"},
    {449, Sys::kFutexWaitv, "futex_waitv"},
};
#elif defined(__aarch64__)
constexpr Known kCalls[] = {
    {22, Sys::kEpollPwait, "epoll_pwait"},
    {25, Sys::kFcntl, "fcntl"},
    {29, Sys::kIoctl, "ioctl"},
    {32, Sys::kFlock, "flock"},
    {63, Sys::kRead, "read"},
    {64, Sys::kWrite, "write"},
    {65, Sys::kReadv, "readv"},
    {66, Sys::kWritev, "writev"},
    {67, Sys::kPread, "pread64"},
    {69, Sys::kPreadv, "preadv"},
    {72, Sys::kPselect6, "pselect6"},
    {73, Sys::kPpoll, "ppoll"},
    {95, Sys::kWaitid, "waitid"},
    {98, Sys::kFutex, "futex"},
    {101, Sys::kNanosleep, "nanosleep"},
    {115, Sys::kClockNanosleep, "clock_nanosleep"},
    {133, Sys::kRtSigsuspend, "rt_sigsuspend"},
    {137, Sys::kRtSigtimedwait, "rt_sigtimedwait"},
    {202, Sys::kAccept, "accept"},
    {203, Sys::kConnect, "connect"},
    {206, Sys::kSendto, "sendto"},
    {207, Sys::kRecvfrom, "recvfrom"},
    {211, Sys::kSendmsg, "sendmsg"},
    {212, Sys::kRecvmsg, "recvmsg"},
    {242, Sys::kAccept4, "accept4"},
    {243, Sys::kRecvmmsg, "recvmmsg"},
    {260, Sys::kWait4, "wait4"},
    {441, Sys::kEpollPwait2, "epoll_pwait2"},
    {449, Sys::kFutexWaitv, "futex_waitv"},
};
#else
constexpr Known kCalls[] = {{-1, Sys::kRead, "read"}};  // no table: every call reads as another one
#endif

const Known* known(long number) {
  for (const auto& k : kCalls) {
    if (k.number == number) return &k;
  }
  return nullptr;
}

bool parse_hex(std::string_view text, uint64_t& out) {
  if (text.starts_with("0x")) text.remove_prefix(2);
  return std::from_chars(text.data(), text.data() + text.size(), out, 16).ec == std::errc{};
}

int32_t as_int(uint64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); }

// A call that moves bytes or waits on descriptors: what it waits on, and whether with a timeout. False: not one.
bool describe_io(DecodedCall& d, Sys sys) {
  const auto& a = d.args;
  switch (sys) {
    case Sys::kRead:
    case Sys::kReadv:
    case Sys::kPread:
    case Sys::kPreadv:
    case Sys::kRecvfrom:
    case Sys::kRecvmsg:
    case Sys::kRecvmmsg:
    case Sys::kAccept:
    case Sys::kAccept4:
    case Sys::kConnect:
      d.call = WaitCall::kDescriptors;
      d.fds = FdSource::kFirstArgument;
      return true;
    case Sys::kWrite:
    case Sys::kWritev:
    case Sys::kSendto:
    case Sys::kSendmsg:
      d.call = WaitCall::kDescriptors;
      d.fds = FdSource::kFirstArgument;
      d.writing = true;
      return true;
    case Sys::kPoll:
      d.timed = as_int(a[2]) >= 0;
      d.call = a[1] == 0 ? WaitCall::kSleep : WaitCall::kDescriptors;
      d.fds = FdSource::kPollArray;
      return true;
    case Sys::kPpoll:
      d.timed = a[2] != 0;
      d.call = a[1] == 0 ? WaitCall::kSleep : WaitCall::kDescriptors;
      d.fds = FdSource::kPollArray;
      return true;
    case Sys::kSelect:
    case Sys::kPselect6:
      d.timed = a[4] != 0;
      d.call = a[0] == 0 || (a[1] == 0 && a[2] == 0) ? WaitCall::kSleep : WaitCall::kDescriptors;
      d.fds = FdSource::kSelectSets;
      return true;
    case Sys::kEpollWait:
    case Sys::kEpollPwait:
      d.timed = as_int(a[3]) >= 0;
      d.call = WaitCall::kDescriptors;
      d.fds = FdSource::kEpoll;
      return true;
    case Sys::kEpollPwait2:
      d.timed = a[3] != 0;
      d.call = WaitCall::kDescriptors;
      d.fds = FdSource::kEpoll;
      return true;
    default: return false;
  }
}

// Every other call a thread may sleep in: sleeps, locks, children, signals, file locks, devices.
void describe(DecodedCall& d, Sys sys) {
  if (describe_io(d, sys)) return;
  const auto& a = d.args;
  switch (sys) {
    case Sys::kNanosleep:
    case Sys::kClockNanosleep:
      d.timed = true;
      d.call = WaitCall::kSleep;
      return;
    case Sys::kFutex:
    case Sys::kFutexWaitv:
      d.timed = a[3] != 0;
      d.call = WaitCall::kLock;
      return;
    case Sys::kWait4:  // wait4(pid, ...): pid > 0 names one child
      d.call = WaitCall::kChild;
      if (as_int(a[0]) > 0) d.child = as_int(a[0]);
      return;
    case Sys::kWaitid:  // waitid(idtype, id, ...): P_PID (1) names one child
      d.call = WaitCall::kChild;
      if (a[0] == 1 && as_int(a[1]) > 0) d.child = as_int(a[1]);
      return;
    case Sys::kPause:
    case Sys::kRtSigsuspend: d.call = WaitCall::kSignal; return;
    case Sys::kRtSigtimedwait:
      d.timed = a[2] != 0;
      d.call = WaitCall::kSignal;
      return;
    case Sys::kFlock:
      d.call = (a[1] & LOCK_NB) != 0 ? WaitCall::kOther : WaitCall::kFileLock;
      d.fds = FdSource::kFirstArgument;
      return;
    case Sys::kFcntl:
      d.call = a[1] == F_SETLKW || a[1] == F_OFD_SETLKW ? WaitCall::kFileLock : WaitCall::kOther;
      d.fds = FdSource::kFirstArgument;
      return;
    case Sys::kIoctl:
      d.call = WaitCall::kDevice;
      d.fds = FdSource::kFirstArgument;
      return;
    default: return;  // the calls describe_io took
  }
}

}  // namespace

std::optional<DecodedCall> decode_syscall_line(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.remove_suffix(1);
  DecodedCall d;
  if (line == "running") {
    d.call = WaitCall::kRunning;
    d.name = "running";
    return d;
  }
  std::vector<std::string_view> fields;
  for (size_t at = 0; at < line.size();) {
    const size_t end = std::min(line.find(' ', at), line.size());
    if (end > at) fields.push_back(line.substr(at, end - at));
    at = end + 1;
  }
  long number = 0;
  if (fields.empty() ||
      std::from_chars(fields[0].data(), fields[0].data() + fields[0].size(), number).ec != std::errc{})
    return std::nullopt;
  if (number < 0) {  // blocked, not in a system call (a page fault...)
    d.call = WaitCall::kOther;
    d.name = "none";
    return d;
  }
  if (fields.size() < 7) return std::nullopt;
  for (size_t i = 0; i < 6; ++i) {
    if (!parse_hex(fields[i + 1], d.args[i])) return std::nullopt;
  }
  const Known* k = known(number);
  if (k == nullptr) {
    d.call = WaitCall::kOther;
    d.name = std::to_string(number);
    return d;
  }
  d.name = k->name;
  describe(d, k->sys);
  return d;
}

}  // namespace meshrun::launcher
