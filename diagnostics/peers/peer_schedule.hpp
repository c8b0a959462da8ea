// The round-robin tournament ("circle method") that orders the pairwise bandwidth measurements: every
// pair of N nodes meets exactly once, and within a round each node is in at most one pair, so a
// pair's throughput is never shared with another measurement on the same node.
#pragma once

#include <vector>

namespace meshrun::diagnostics {

/// Two positions in 0..n-1 with first < second; `first` connects, `second` accepts.
struct PeerPair {
  int first = 0;
  int second = 0;
  bool operator==(const PeerPair&) const = default;
};

/// n-1 rounds for even n, n for odd n (one node sits out each round); empty for n < 2.
std::vector<std::vector<PeerPair>> round_robin_rounds(int n);

}  // namespace meshrun::diagnostics
