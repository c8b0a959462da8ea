// Straggler detection: which ranks of a run are slower per step than the rest. Pure (no clock, no I/O):
// Membership feeds it the progress the agents sent with their heartbeats.
//
// A rank's measure is the compute_s its worker reports (time per step spent computing, not waiting for
// other ranks), or its step time when it reports none. In lockstep data-parallel training every rank's
// step time equals the slowest rank's, so only compute_s can single a straggler out there; step times
// still work for ranks that do not wait for each other. Each measure is already a median over the
// agent's recent window of steps, so one slow step names nobody.
#pragma once

#include <string>
#include <vector>

#include "proto/rendezvous_messages.hpp"

namespace meshrun::rendezvous {

/// One rank's progress and the host it runs on.
struct HostedRank {
  std::string host;
  proto::RankProgress progress;
};

/// The ranks whose measure exceeds `threshold` times the run's median measure (the lower median, so
/// that with two ranks the faster one is the reference). Only ranks in the "train" phase that are not
/// hung and have a measure count; fewer than two such ranks, or threshold <= 0, name nobody.
std::vector<proto::Straggler> find_stragglers(const std::vector<HostedRank>& ranks, double threshold);

}  // namespace meshrun::rendezvous
