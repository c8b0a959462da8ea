// RendezvousSettings: what the rendezvous backends (rdzv/ for the daemon, etcd/ for etcd v3) are told: the
// nodes, the backend and where it is, torchrun's --rdzv-conf keys, this node's rank and address, and what the
// round tells the daemon (spares, the straggler threshold). cli/options.hpp fills them from the command line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/endpoint.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"

namespace meshrun::launcher {

/// --rdzv-backend: static (node 0 hosts), c10d (meshrun's daemon), etcd-v3 (an etcd cluster keeps the state).
enum class RdzvBackend { kStatic, kC10d, kEtcd };

/// etcd's password for --rdzv-backend etcd-v3, when --rdzv-conf gives none: `ps` does not show it.
inline constexpr const char* kEtcdPasswordEnv = "MESHRUN_ETCD_PASSWORD";

/// --rdzv-conf keys (torchrun's names); times in seconds.
struct RdzvConf {
  double join_timeout_s = 600;
  double last_call_timeout_s = 30;
  double close_timeout_s = 30;
  double read_timeout_s = 60;
  double heartbeat_timeout_s = 5;
  double keep_alive_interval_s = 1;
  int keep_alive_max_attempt = 3;
  std::optional<bool> is_host;        // force (or forbid) hosting the daemon under c10d
  std::optional<uint16_t> http_port;  // the hosted daemon's HTTP live view (meshrun-rendezvous --http-port)
  std::string token;          // the join token (never printed): token=..., else $MESHRUN_RDZV_TOKEN; empty: none
  std::string local_addr;     // torchrun's local_addr: as --local-addr when that is not given
  std::string etcd_user;      // etcd-v3: etcd's user/password auth (username=); empty: none
  std::string etcd_password;  // password=, or password_file='s first line (never printed)
  // etcd-v3 over TLS: protocol=https (or https:// members); ca_cert= (cacert=), ssl_cert= (cert=) and
  // ssl_cert_key= (key=), PEM files, as torch's etcd backends spell them.
  std::optional<bool> etcd_https;  // protocol=; unset: as the members are written
  std::string etcd_ca_file;
  std::string etcd_cert_file;
  std::string etcd_key_file;
};

/// The rendezvous flags (--nnodes, --rdzv-*, --node-rank, --master-*, --local-addr, --host, --allow, --no-evict,
/// --straggler-threshold, --replace-slow-nodes) and the resolved worker count per node.
struct RendezvousSettings {
  int min_nodes = 1;
  int max_nodes = 1;
  RdzvBackend backend = RdzvBackend::kStatic;
  std::optional<Endpoint> rdzv_endpoint;  // c10d: where the daemon is (or is to be hosted)
  std::vector<Endpoint> etcd_endpoints;   // etcd-v3: the cluster's members (--rdzv-endpoint h1:2379,h2:2379)
  std::string run_id = "none";
  RdzvConf rdzv_conf;
  bool standalone = false;
  int node_rank = 0;
  bool node_rank_given = false;
  std::string master_addr = "127.0.0.1";
  std::optional<uint16_t> master_port;    // static: unset means 29500 (or a free port when nnodes is 1)
  std::string local_addr;                 // the address other nodes reach this one at; empty = host name
  std::string hosted_bind;                // --host: where the rendezvous this agent hosts listens; empty: the default
  std::vector<std::string> hosted_allow;  // --allow: CIDRs the hosted rendezvous accepts; empty: everyone
  bool evict_suspects = true;             // a hang verdict's suspect node makes way for a spare (--no-evict)
  int nproc_per_node = 1;                 // resolved from nproc_spec
  double straggler_threshold = 1.3;       // a rank this many times slower than the median is named (0: off)
  proto::SlowNodePolicy slow_nodes;       // --replace-slow-nodes, --slow-node-after, --slow-node-cooldown
};

}  // namespace meshrun::launcher
