// StoreClient: a blocking TCPStore-protocol client (the launcher's and the trainer's view of the daemon).
// It speaks the same bytes as PyTorch's c10d TCPStore client, so it also works against a PyTorch TCPStore
// server for the store operations; meshrun() needs meshrun-rendezvous.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/clock.hpp"
#include "common/endpoint.hpp"
#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace meshrun::proto {

/// Why a connection could not be made; `meshrun ping` and `meshrun check` report each differently.
enum class ConnectFailure { kResolve, kRefused, kTimeout, kUnreachable, kRejected, kOther };

/// A failed connect(); the message names the endpoint, the cause and what to check.
class ConnectError : public NetworkError {
 public:
  ConnectError(ConnectFailure kind, const std::string& message) : NetworkError(message), kind_(kind) {}
  ConnectFailure kind() const { return kind_; }

 private:
  ConnectFailure kind_;
};

/// Opens a TCP connection to `endpoint` before `deadline` (one attempt per resolved address).
/// Throws ConnectError. Shared by StoreClient and the diagnostics.
UniqueFd connect_tcp(const Endpoint& endpoint, TimePoint deadline);

struct ConnectOptions {
  /// Total time to keep trying (refused connections are retried with backoff until then).
  Duration connect_timeout = std::chrono::seconds(30);
  /// Default deadline of one request/response exchange (and of get()/wait() when none is given).
  Duration op_timeout = std::chrono::seconds(60);
  /// Retry when the connection is refused (the daemon may not be up yet). ping uses false.
  bool retry_refused = true;
};

class StoreClient {
 public:
  /// Resolves, connects (retrying until connect_timeout), sends VALIDATE and a PING.
  /// Throws NetworkError / TimeoutError whose message names the endpoint and the cause.
  static StoreClient connect(const Endpoint& endpoint, const ConnectOptions& options = {});

  StoreClient(StoreClient&&) noexcept = default;
  StoreClient& operator=(StoreClient&&) noexcept = default;
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;
  ~StoreClient() = default;

  void set(const std::string& key, const std::string& value);
  /// Waits (up to the op timeout) until `key` exists, then returns its value.
  std::string get(const std::string& key);
  int64_t add(const std::string& key, int64_t delta);
  /// Sets key to `desired` if its value is `expected` (or it is absent and `expected` is empty);
  /// returns the value stored afterwards.
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired);
  /// True when every key exists.
  bool check(const std::vector<std::string>& keys);
  /// Blocks until every key exists; throws TimeoutError after `timeout`.
  void wait(const std::vector<std::string>& keys, std::optional<Duration> timeout = std::nullopt);
  bool delete_key(const std::string& key);
  int64_t num_keys();
  void append(const std::string& key, const std::string& value);
  std::vector<std::string> multi_get(const std::vector<std::string>& keys);
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values);
  /// Sends a PING with `nonce` and checks the echo.
  void ping(uint32_t nonce);

  /// One meshrun extension request (JSON in, JSON out). `timeout` bounds the whole exchange.
  /// A response with an "error" member is thrown as RemoteError carrying that text.
  nlohmann::json meshrun(const nlohmann::json& request, std::optional<Duration> timeout = std::nullopt);

  /// The endpoint as given, for messages.
  const Endpoint& endpoint() const { return endpoint_; }

 private:
  StoreClient(UniqueFd fd, Endpoint endpoint, ConnectOptions options)
      : fd_(std::move(fd)), endpoint_(std::move(endpoint)), options_(options) {}

  /// The socket as a source for the reply decoders of proto/store/reply.hpp, bounded by one deadline.
  class ReplySource;

  void send_bytes(const std::string& bytes, TimePoint deadline);
  void recv_exact(void* data, size_t size, TimePoint deadline);
  void arm_recv_timeout(TimePoint deadline);
  TimePoint op_deadline() const;

  UniqueFd fd_;
  std::string rbuf_;  // bytes received but not consumed yet (one recv() usually holds a whole reply)
  size_t rpos_ = 0;
  Duration recv_timeout_ = Duration::zero();  // SO_RCVTIMEO currently set on fd_
  Endpoint endpoint_;
  ConnectOptions options_;
};

}  // namespace meshrun::proto
