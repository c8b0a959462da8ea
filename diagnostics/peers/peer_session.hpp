// The pairwise bandwidth session behind `meshrun check --bandwidth --peers N`: N instances, one per
// node, started at about the same time, meet through the daemon's store and measure every pair.
//
//   join     index = ADD(joined) - 1; listen on a free port; SET node/<index> = {host, addr:port}
//   close    #0 waits (<= join timeout) for node/0..N-1 and SETs members = who came; the others
//            WAIT for members (a late instance finds itself left out and says so)
//   rounds   round_robin_rounds(members): the lower index connects, the higher accepts; after each
//            round a barrier (SET r<round>/<index>, WAIT for the others, bounded): a member that
//            misses it is named and its later pairs are skipped
//   report   SET result/<index> = own pairs; ADD done; #0 WAITs (bounded) for every result, merges,
//            and deletes the session's keys once everyone is done
//
// Keys live under meshrun/bw/<session>/ on the daemon's own store (the rendezvous port).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "common/endpoint.hpp"
#include "diagnostics/peers/peer_matrix.hpp"

namespace meshrun::diagnostics {

struct PeerSessionOptions {
  std::string session;                                  // --rdzv-id: scopes the keys; use a new one for every check run
  int peers = 2;                                        // --peers: instances expected
  Duration join_timeout = std::chrono::seconds(60);     // --peers-timeout: for all instances to join
  Duration partner_timeout = std::chrono::seconds(10);  // for the partner of a round to connect / accept
  Duration op_timeout = std::chrono::seconds(2);        // connecting to the daemon, one store request
  uint64_t bytes = 256ull << 20;                        // --peer-mib: per pair and direction, at most
  Duration max_transfer = std::chrono::seconds(2);      // --peer-seconds: per pair and direction, at most
  int pings = 100;                                      // latency samples per pair
};

struct PeerSessionOutcome {
  int index = -1;                 // this instance's place in the session
  int peers = 0;                  // instances expected (--peers)
  int joined = 0;                 // instances that had joined when #0 closed the session
  std::vector<PeerNode> nodes;    // who measured (members), by index
  std::vector<int> missing;       // indices in 0..peers-1 that never came, or came after the close
  std::vector<std::string> lost;  // members that missed a round's barrier, with the round
  int rounds = 0;
  bool complete_view = false;           // true on #0: `pairs` holds every pair of the session
  std::vector<PairResult> pairs;        // #0: every pair (merged); others: their own pairs
  std::vector<std::string> unreported;  // #0: members whose results never arrived
};

/// Runs this instance's part of the session against the daemon at `endpoint` (numeric address).
/// Throws meshrun::Error when this instance cannot take part at all (daemon unusable, session full,
/// joined too late, #0 gone); everything else (missing peers, failed pairs) is in the outcome.
PeerSessionOutcome run_peer_session(const Endpoint& endpoint, const PeerSessionOptions& options);

/// The store key prefix of a session: "meshrun/bw/<session>/".
std::string peer_session_prefix(const std::string& session);

}  // namespace meshrun::diagnostics
