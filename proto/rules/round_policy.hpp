// The round policy both rendezvous backends apply: when an open round closes, which joined nodes take its
// seats, and when a restart leaves too few nodes to go on. Node ranks come from assign_group_ranks
// (group_ranks.hpp). The daemon (rendezvous/membership.cpp) feeds it what its connections and heartbeats
// tell; the etcd backend (launcher/etcd/run_record.cpp) what its keys and leases tell. Pure: no clock, no
// I/O. tests/launcher/test_round_scenarios.cpp runs the same round scenarios through both backends.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace meshrun::proto {

/// What a backend knows about an open round when it asks whether the round may close.
struct OpenRound {
  int joined = 0;  // nodes in the round now: survivors back, spares, late joiners
  int min_nodes = 1;
  int max_nodes = 1;
  bool restart = false;           // a restart opened it and survivors of the last round are expected back
  int survivors_out = 0;          // survivors not back yet and not known lost
  int survivors_due = 0;          // ... of them, known alive (stopping their workers): they will be back
  bool newcomer_joined = false;   // a joined node was not in the last round (a spare, a late joiner)
  bool last_call_passed = false;  // min_nodes joined, and the last-call window since has passed
};

/// True when the round closes now:
///  - max nodes joined and no survivor is due: a spare takes the seat of a survivor that may be lost;
///  - at least min nodes joined after a restart and every survivor is back (or known lost): at once;
///  - at least min nodes joined and the last call passed, unless a survivor is due and a newcomer would
///    take its seat (or the round is full): survivors first, until they are back or known lost.
[[nodiscard]] bool round_closes(const OpenRound& round);

/// The joined nodes (join order) that take the round's seats, as indices: the survivors of the last round
/// first, then the others in join order, at most `max_nodes`. The others wait for the next round.
[[nodiscard]] std::vector<size_t> seated(const std::vector<bool>& is_survivor, int max_nodes);

/// The run fails when a restart leaves fewer than `min_nodes`: the reason, naming the count and the flag,
/// or nothing when it goes on.
[[nodiscard]] std::optional<std::string> too_few_nodes(const std::string& reason, int remaining, int min_nodes);

}  // namespace meshrun::proto
