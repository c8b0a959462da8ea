#include "launcher/attempt.hpp"

#include "common/endpoint.hpp"
#include "launcher/rdzv/rendezvous_backend.hpp"

namespace meshrun::launcher {
namespace {

std::vector<int> node_ranks(const proto::Assignment& assignment, int nproc_per_node) {
  std::vector<int> ranks;
  for (int lr = 0; lr < nproc_per_node; ++lr) ranks.push_back(assignment.rank_offset + lr);
  return ranks;
}

}  // namespace

Attempt::Attempt(const proto::Assignment& assignment_, RendezvousBackend& rdzv_, const std::string& progress_dir,
                 int nproc_per_node, const HangPolicy& policy, const SpecFor& spec_for,
                 std::chrono::milliseconds beat_every)
    : assignment(assignment_),
      rdzv(rdzv_),
      progress(progress_dir, node_ranks(assignment_, nproc_per_node), policy, assignment_.steps_done),
      group(beating_while_spawning(spec_for(progress), beat_every)),
      exchange(Endpoint{strip_brackets(assignment_.master_addr), static_cast<uint16_t>(assignment_.master_port)},
               assignment_.round, assignment_.group_rank, assignment_.group_world_size),
      clock(assignment_.round, static_cast<size_t>(nproc_per_node), std::chrono::steady_clock::now()) {
  spawning_.reset();
}

GroupSpec Attempt::beating_while_spawning(GroupSpec spec, std::chrono::milliseconds every) {
  if (every.count() > 0) spawning_.emplace(rdzv, every, progress.summaries(std::chrono::steady_clock::now()));
  return spec;
}

proto::AttemptMilestones Attempt::account_now() const {
  proto::AttemptMilestones m;
  m.round = assignment.round;
  m.steps = progress.step_account(std::chrono::steady_clock::now());
  return m;
}

}  // namespace meshrun::launcher
