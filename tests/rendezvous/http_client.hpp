// A raw HTTP/1.1 client for the live view tests: sends bytes as given (so tests can send malformed or
// pipelined requests) and reads until the server closes, a complete response arrived, or a deadline.
// Plain POSIX sockets: what it checks is the daemon's HTTP, not a client library's.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace meshrun::testing {

struct HttpResponse {
  int status = 0;                              // 0: no response (the server closed, or the deadline passed)
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string raw;              // every byte received
  bool closed_by_peer = false;  // the server closed the connection (EOF or reset)

  /// The header's value ("" when absent); `name` lower-case.
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

/// Parses the first response in `raw` (status line, headers, Content-Length body); status 0 if incomplete.
inline HttpResponse parse_http_response(const std::string& raw) {
  HttpResponse r;
  r.raw = raw;
  const auto end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || end == std::string::npos) return r;
  size_t line_end = raw.find("\r\n");
  for (size_t at = line_end + 2; at < end;) {
    const size_t next = raw.find("\r\n", at);
    const std::string line = raw.substr(at, next - at);
    const auto colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      r.headers[name] = line.substr(line.find_first_not_of(' ', colon + 1));
    }
    at = next + 2;
  }
  const size_t length = r.headers.count("content-length") ? std::stoul(r.headers.at("content-length")) : 0;
  if (raw.size() < end + 4 + length) return r;
  r.body = raw.substr(end + 4, length);
  r.status = std::stoi(raw.substr(9, 3));
  return r;
}

/// Connects to 127.0.0.1:`port`, sends `request`, reads until EOF (or `limit`); `until_complete` stops at
/// the first complete response instead (keep-alive connections stay open).
inline HttpResponse http_exchange(uint16_t port, const std::string& request, bool until_complete = false,
                                  std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  std::string raw;
  bool closed = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    timeval tv{0, 100 * 1000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    const auto end = std::chrono::steady_clock::now() + limit;
    char buf[16384];
    while (std::chrono::steady_clock::now() < end) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        raw.append(buf, static_cast<size_t>(n));
        if (until_complete && parse_http_response(raw).status != 0) break;
      } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        closed = true;
        break;
      }
    }
  } else {
    closed = true;
  }
  ::close(fd);
  HttpResponse r = parse_http_response(raw);
  r.closed_by_peer = closed;
  return r;
}

/// GET `path` with Connection: close.
inline HttpResponse http_get(uint16_t port, const std::string& path) {
  return http_exchange(port, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
}

}  // namespace meshrun::testing
