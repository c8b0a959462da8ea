#include "diagnostics/peers/peer_schedule.hpp"

#include <utility>

namespace meshrun::diagnostics {

std::vector<std::vector<PeerPair>> round_robin_rounds(int n) {
  std::vector<std::vector<PeerPair>> rounds;
  if (n < 2) return rounds;
  // Odd n: a phantom position n makes the count even; whoever meets it sits the round out.
  const int slots = n % 2 == 0 ? n : n + 1;
  for (int r = 0; r < slots - 1; ++r) {
    std::vector<PeerPair> round;
    for (int k = 0; k < slots / 2; ++k) {
      // Position slots-1 stays put; the others rotate by one each round.
      const int a = k == 0 ? slots - 1 : (r + k) % (slots - 1);
      const int b = (r + slots - 1 - k) % (slots - 1);
      if (a >= n || b >= n) continue;
      round.push_back(a < b ? PeerPair{a, b} : PeerPair{b, a});
    }
    rounds.push_back(std::move(round));
  }
  return rounds;
}

}  // namespace meshrun::diagnostics
