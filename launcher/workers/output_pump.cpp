#include "launcher/workers/output_pump.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace meshrun::launcher {
namespace {

constexpr size_t kReadChunk = 64 * 1024;
// A "line" longer than this is emitted as is, so a worker that never prints '\n' cannot grow our memory.
constexpr size_t kMaxLine = 64 * 1024;
constexpr size_t kMaxTailLineBytes = 1000;

}  // namespace

void write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        // A non-blocking console that is full: wait for it rather than drop lines.
        ::usleep(1000);
        continue;
      }
      return;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

std::string expand_prefix(const std::string& tmpl, int rank, int local_rank, const std::string& role,
                          const std::string& hostname) {
  std::string out;
  for (size_t i = 0; i < tmpl.size();) {
    const auto var = [&](const char* name) {
      const std::string token = std::string("${") + name + "}";
      return tmpl.compare(i, token.size(), token) == 0 ? token.size() : 0;
    };
    if (size_t n = var("rank")) {
      out += std::to_string(rank);
      i += n;
    } else if ((n = var("local_rank"))) {
      out += std::to_string(local_rank);
      i += n;
    } else if ((n = var("role_name"))) {
      out += role;
      i += n;
    } else if ((n = var("hostname"))) {
      out += hostname;
      i += n;
    } else {
      out += tmpl[i++];
    }
  }
  return out;
}

void LineDuplicator::offer(std::string_view line, std::string_view prefixed) const {
  for (const auto& filter : filters_) {
    if (line.find(filter) != std::string_view::npos) {
      write_all(file_.get(), prefixed.data(), prefixed.size());  // one write: whole lines from each worker
      return;
    }
  }
}

OutputPump::OutputPump(UniqueFd pipe, std::string prefix, int console_fd, UniqueFd file, size_t tail_lines,
                       std::shared_ptr<const LineDuplicator> duplicate)
    : pipe_(std::move(pipe)),
      prefix_(std::move(prefix)),
      console_fd_(console_fd),
      file_(std::move(file)),
      tail_lines_(tail_lines),
      duplicate_(std::move(duplicate)) {
  const int flags = ::fcntl(pipe_.get(), F_GETFL);
  ::fcntl(pipe_.get(), F_SETFL, flags | O_NONBLOCK);
}

void OutputPump::emit_line(const char* data, size_t size, bool add_newline) {
  if (console_fd_ >= 0 || duplicate_) {
    // One write per line: lines of different workers never interleave mid-line.
    std::string line;
    line.reserve(prefix_.size() + size + 1);
    line.append(prefix_).append(data, size);
    if (add_newline) line.push_back('\n');
    if (console_fd_ >= 0) write_all(console_fd_, line.data(), line.size());
    if (duplicate_) duplicate_->offer(std::string_view(data, size), line);
  }
  if (tail_lines_ > 0) {
    std::string kept(data, std::min(size, kMaxTailLineBytes));
    if (!kept.empty() && kept.back() == '\n') kept.pop_back();
    tail_.push_back(std::move(kept));
    if (tail_.size() > tail_lines_) tail_.pop_front();
  }
}

bool OutputPump::on_readable() {
  if (!pipe_.valid()) return false;
  char buf[kReadChunk];
  while (true) {
    const ssize_t n = ::read(pipe_.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return true;
      finish();
      return false;
    }
    if (n == 0) {
      finish();
      return false;
    }
    if (file_.valid()) write_all(file_.get(), buf, static_cast<size_t>(n));
    // Split into lines; a line started in an earlier read waits in partial_.
    const char* p = buf;
    const char* end = buf + n;
    while (p < end) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
      if (nl == nullptr) {
        partial_.append(p, static_cast<size_t>(end - p));
        if (partial_.size() >= kMaxLine) {
          emit_line(partial_.data(), partial_.size(), true);
          partial_.clear();
        }
        break;
      }
      if (partial_.empty()) {
        emit_line(p, static_cast<size_t>(nl - p + 1), false);
      } else {
        partial_.append(p, static_cast<size_t>(nl - p + 1));
        emit_line(partial_.data(), partial_.size(), false);
        partial_.clear();
      }
      p = nl + 1;
    }
  }
}

void OutputPump::finish() {
  if (!partial_.empty()) {
    emit_line(partial_.data(), partial_.size(), true);
    partial_.clear();
  }
  pipe_.reset();
}

}  // namespace meshrun::launcher
