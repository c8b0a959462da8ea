// EtcdClient: etcd's documented v3 API through its JSON gateway (HTTP/1.1 POST to /v3/...; keys and
// values base64, 64-bit integers as strings, false and 0 omitted). Each call tries the cluster's
// endpoints in turn, starting with the last one that answered: a member that is down or partitioned
// away is skipped. Calls are synchronous and bounded by a deadline; a short-lived connection per call
// keeps a dead member from holding a half-open socket.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/endpoint.hpp"
#include "launcher/etcd/gateway_exchange.hpp"

namespace meshrun::launcher::etcd {

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;
};

struct RangeResult {
  std::vector<KeyValue> kvs;
  int64_t count = 0;
  int64_t revision = 0;  // the store's revision when it was read
};

/// One comparison of a transaction ("If" part).
struct Compare {
  enum class Target { kVersion, kCreateRevision, kModRevision, kValue };
  enum class Result { kEqual, kNotEqual, kGreater, kLess };
  std::string key;
  std::string range_end;  // non-empty: every key in [key, range_end) must satisfy it
  Target target = Target::kVersion;
  Result result = Result::kEqual;
  int64_t number = 0;  // for the revision and version targets
  std::string value;   // for kValue
};

/// One operation of a transaction's "then" or "else" branch.
struct Operation {
  enum class Kind { kPut, kRange, kDelete };
  Kind kind = Kind::kPut;
  std::string key;
  std::string range_end;
  std::string value;
  int64_t lease = 0;
};

struct TxnResult {
  bool succeeded = false;
  int64_t revision = 0;
  std::vector<RangeResult> ranges;  // one per kRange operation of the branch taken, in order
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;
};

// The shapes the rendezvous uses.
/// The key's mod revision is `revision` (nobody changed it since it was read).
Compare mod_revision_is(const std::string& key, int64_t revision);
/// The key does not exist.
Compare absent(const std::string& key);
/// No key in [key, range_end) changed after `revision`.
Compare unchanged_since(const std::string& key, const std::string& range_end, int64_t revision);
Operation put_op(const std::string& key, const std::string& value, int64_t lease = 0);
Operation range_op(const std::string& key, const std::string& range_end = "");
Operation delete_op(const std::string& key, const std::string& range_end = "");

/// The key just after every key that starts with `prefix`: [prefix, prefix_end(prefix)) is the prefix.
std::string prefix_end(const std::string& prefix);

/// etcd's user/password auth (--rdzv-conf username=, password= or password_file=): empty user, none.
struct EtcdCredentials {
  std::string user;
  std::string password;
};

class EtcdClient {
 public:
  /// `endpoints`: the cluster's client URLs as host:port. `timeout` bounds each call. With a user, the
  /// client authenticates (/v3/auth/authenticate) before its first call, and again when a member says its token
  /// is no longer valid (they expire, and a restarted member forgets them); the token travels in the
  /// Authorization header.
  /// With `tls` enabled, every call is HTTPS (gateway_exchange.hpp); a CA or client certificate it cannot use is
  /// a UsageError here.
  EtcdClient(std::vector<Endpoint> endpoints, std::chrono::milliseconds timeout, EtcdCredentials credentials = {},
             const EtcdTls& tls = {});

  RangeResult range(const std::string& key, const std::string& range_end = "", bool count_only = false);
  /// Returns the store's revision after the put.
  int64_t put(const std::string& key, const std::string& value, int64_t lease = 0);
  TxnResult txn(const std::vector<Compare>& compares, const std::vector<Operation>& success,
                const std::vector<Operation>& failure = {});
  /// Grants a lease of `ttl_s` seconds; returns its id.
  int64_t grant_lease(int64_t ttl_s);
  /// Renews the lease; returns its remaining TTL in seconds, 0 when it has expired (its keys are gone).
  int64_t keep_alive(int64_t lease);
  /// Revokes the lease, deleting its keys. Never throws (the lease expires anyway).
  void revoke(int64_t lease) noexcept;
  /// Waits up to `wait` for changes to [key, range_end) at or after `start_revision`; returns them
  /// (empty when nothing changed in time). A compacted start revision is an error (ProtocolError).
  std::vector<WatchEvent> watch(const std::string& key, const std::string& range_end, int64_t start_revision,
                                std::chrono::milliseconds wait);

  /// One call of the JSON gateway at `path` ("/v3/auth/user/add"...), its JSON answer: administration the
  /// rendezvous itself does not make (the tests set up users and roles with it).
  std::string call(const std::string& path, const std::string& body) { return post(path, body); }

  /// "host1:2379,host2:2379": for messages.
  std::string endpoints_text() const;

 private:
  /// POSTs `body` to `path` on the first endpoint that answers; throws NetworkError naming every
  /// endpoint and why it failed when none does, ProtocolError when etcd answers with an error.
  std::string post(const std::string& path, const std::string& body);
  /// The Authorization header for calls to `endpoint` ("" without a user); authenticates when it has no token.
  std::string authorization(const Endpoint& endpoint);
  /// One call to `endpoint`, over TLS when the client has it, with the Authorization header.
  GatewayCall call(const Endpoint& endpoint, GatewayDeadline send_deadline, GatewayDeadline deadline);

  std::vector<Endpoint> endpoints_;
  std::chrono::milliseconds timeout_;
  EtcdCredentials credentials_;
  std::shared_ptr<GatewayTls> tls_;  // null: plain HTTP
  std::string auth_token_;           // etcd's, from the last authentication
  size_t current_ = 0;               // the endpoint that answered last
};

}  // namespace meshrun::launcher::etcd
