// Node ranks for a closing round, shared by the daemon's Membership and the launcher's etcd backend so
// both assign the same way: requested ranks first (when in range and not taken), then the ranks survivors
// of the last round held (a restart moves no node; a spare takes the rank of the node it replaces), then
// the rest in (host, pid) order for determinism.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meshrun::proto {

struct RankRequest {
  int requested_rank = -1;  // --node-rank, or -1
  int previous_rank = -1;   // its node rank in the last round (a survivor), or -1
  std::string host;
  int64_t pid = 0;
};

/// The group rank of each request, in the requests' order (a permutation of 0..n-1).
std::vector<int> assign_group_ranks(const std::vector<RankRequest>& requests);

}  // namespace meshrun::proto
