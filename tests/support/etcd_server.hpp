// A real etcd member for tests (Debian's etcd-server, installed by scripts/setup.sh): a single-member
// cluster on 127.0.0.1 with free ports and its data in a temporary folder, stopped on destruction.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>
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

/// Certificates for a TLS member (PEM files): made by tests/launcher/torchrun/etcd_server.py's make_certs with
/// openssl: a CA, a server certificate for 127.0.0.1, a client certificate of the CA, and an unrelated CA.
struct EtcdCerts {
  std::string ca, server_crt, server_key, client_crt, client_key, other_ca;

  /// Makes them in `directory` with etcd_server.py from `helpers` (its folder: an absolute path, which __FILE__ is
  /// not under ccache's CCACHE_BASEDIR).
  static EtcdCerts make(const std::string& directory, const std::string& helpers) {
    Process maker(
        {"python3", "-c",
         "import sys; sys.path.insert(0, sys.argv[1]); import etcd_server; etcd_server.make_certs(sys.argv[2])",
         helpers, directory},
        {}, directory + "/make_certs.log");
    if (maker.wait(std::chrono::seconds(60)) != 0)
      throw std::runtime_error("cannot make test certificates (openssl): " + read_file(directory + "/make_certs.log"));
    const auto at = [&](const char* name) { return directory + "/" + name; };
    return {at("ca.crt"), at("server.crt"), at("server.key"), at("client.crt"), at("client.key"), at("other-ca.crt")};
  }
  /// What a client of the member shows: the CA and the client certificate.
  launcher::etcd::EtcdTls client_tls() const { return {true, ca, client_crt, client_key}; }
};

class EtcdServer {
 public:
  /// With `certs`, the member serves TLS only and wants a client certificate of the CA (--client-cert-auth).
  explicit EtcdServer(std::optional<EtcdCerts> certs = std::nullopt)
      : client_port_(free_port()), peer_port_(free_port()), certs_(std::move(certs)) {
    if (::access("/usr/bin/etcd", X_OK) != 0) {
      throw std::runtime_error("/usr/bin/etcd is missing: install etcd-server (scripts/setup.sh does)");
    }
    const std::string client = std::string(certs_ ? "https" : "http") + "://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
    std::vector<std::string> argv{"/usr/bin/etcd",
                                  "--name",
                                  "t",
                                  "--data-dir",
                                  dir_.path() + "/data",
                                  "--listen-client-urls",
                                  client,
                                  "--advertise-client-urls",
                                  client,
                                  "--listen-peer-urls",
                                  peer,
                                  "--initial-advertise-peer-urls",
                                  peer,
                                  "--initial-cluster",
                                  "t=" + peer,
                                  "--initial-cluster-state",
                                  "new"};
    if (certs_) {
      argv.insert(argv.end(), {"--cert-file", certs_->server_crt, "--key-file", certs_->server_key, "--trusted-ca-file",
                               certs_->ca, "--client-cert-auth"});
    }
    process_ = std::make_unique<Process>(argv, std::vector<std::string>{}, dir_.path() + "/etcd.log");
    launcher::etcd::EtcdClient probe({endpoint()}, std::chrono::milliseconds(500), {},
                                     certs_ ? certs_->client_tls() : launcher::etcd::EtcdTls{});
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
  std::optional<EtcdCerts> certs_;
  std::unique_ptr<Process> process_;
};

}  // namespace meshrun::testing
