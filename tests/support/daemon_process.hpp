// A meshrun-rendezvous executable started for a test on 127.0.0.1 with free ports: waits until it announces
// its store endpoint ("listening on HOST:PORT", and "http on HOST:PORT" when --http-port is among the
// arguments) and throws when it does not. SIGTERM and a reap on destruction. For the daemon as a library,
// in-process, see daemon.hpp.
#pragma once

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/subprocess.hpp"

namespace meshrun::testing {

class DaemonProcess {
 public:
  /// `binary`: the meshrun-rendezvous path; `extra`: more flags; `log`: where its output goes.
  DaemonProcess(const std::string& binary, const std::vector<std::string>& extra, const std::string& log)
      : process_(argv(binary, extra), {}, log) {
    const bool wants_http = std::find(extra.begin(), extra.end(), "--http-port") != extra.end();
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (endpoint_.empty() || (wants_http && http_port_ == 0)) {
      if (std::chrono::steady_clock::now() > end || !process_alive(process_.pid())) {
        throw std::runtime_error("meshrun-rendezvous did not announce its ports (got '" + process_.output() + "')");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      const std::string out = process_.output();
      endpoint_ = line_after(out, "listening on ");
      const std::string http = line_after(out, "http on ");
      if (!http.empty()) http_port_ = static_cast<uint16_t>(std::stoi(http.substr(http.rfind(':') + 1)));
    }
    port_ = static_cast<uint16_t>(std::stoi(endpoint_.substr(endpoint_.rfind(':') + 1)));
  }
  ~DaemonProcess() {
    process_.signal(SIGTERM);
    process_.wait(std::chrono::seconds(30));
  }
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  /// "127.0.0.1:PORT"
  const std::string& endpoint() const { return endpoint_; }
  uint16_t port() const { return port_; }
  /// 0 unless --http-port was given.
  uint16_t http_port() const { return http_port_; }
  std::string log() const { return process_.output(); }

 private:
  static std::vector<std::string> argv(const std::string& binary, const std::vector<std::string>& extra) {
    std::vector<std::string> out = {binary, "--host", "127.0.0.1", "--port", "0"};
    out.insert(out.end(), extra.begin(), extra.end());
    return out;
  }
  Process process_;
  std::string endpoint_;
  uint16_t port_ = 0;
  uint16_t http_port_ = 0;
};

}  // namespace meshrun::testing
