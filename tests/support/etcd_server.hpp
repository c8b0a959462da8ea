// A real etcd member for tests (Debian's etcd-server, installed by scripts/setup.sh): a single-member
// cluster on 127.0.0.1 with free ports and its data in a temporary folder, stopped on destruction.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/endpoint.hpp"
#include "launcher/etcd/etcd_client.hpp"
#include "support/subprocess.hpp"

namespace meshrun::testing {

/// A port nobody listens on right now (bound to 0, then released).
inline uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

class EtcdServer {
 public:
  EtcdServer() : client_port_(free_port()), peer_port_(free_port()) {
    if (::access("/usr/bin/etcd", X_OK) != 0) {
      throw std::runtime_error("/usr/bin/etcd is missing: install etcd-server (scripts/setup.sh does)");
    }
    const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
    process_ = std::make_unique<Process>(
        std::vector<std::string>{"/usr/bin/etcd", "--name", "t", "--data-dir", dir_.path() + "/data",
                                 "--listen-client-urls", client, "--advertise-client-urls", client,
                                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster",
                                 "t=" + peer, "--initial-cluster-state", "new"},
        std::vector<std::string>{}, dir_.path() + "/etcd.log");
    launcher::etcd::EtcdClient probe({endpoint()}, std::chrono::milliseconds(500));
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (;;) {
      try {
        probe.range("probe");
        return;
      } catch (const std::exception& e) {
        if (std::chrono::steady_clock::now() > end) {
          throw std::runtime_error(std::string("etcd did not come up: ") + e.what() + "\n" + log());
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  Endpoint endpoint() const { return Endpoint{"127.0.0.1", client_port_}; }
  std::string log() const { return read_file(dir_.path() + "/etcd.log"); }
  /// Stops the member (SIGKILL: as a crashed host would).
  void kill() {
    process_->signal(SIGKILL);
    process_->wait();
  }

 private:
  TempDir dir_;
  uint16_t client_port_;
  uint16_t peer_port_;
  std::unique_ptr<Process> process_;
};

}  // namespace meshrun::testing
