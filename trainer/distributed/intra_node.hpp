// Intra-node transport choice: whether every rank of a process group runs on this node, under the same
// launcher, and if so the cross-memory-attach transport (cma_transport.hpp) their all-gathers and
// reduce-scatters use instead of Gloo's loopback sockets. Ranks of different launchers stay on Gloo even
// on one machine: a launcher is a node, and tests run several in network namespaces to exercise the network.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "trainer/config/trainer_config.hpp"
#include "trainer/distributed/cma_transport.hpp"
#include "trainer/distributed/dist_env.hpp"

namespace c10d {
class Store;
}  // namespace c10d

namespace meshrun::trainer {

/// What the group chose: a transport, or none, and a line that says which and why.
struct IntraNodeChoice {
  std::shared_ptr<CmaTransport> transport;  // null: Gloo moves the bytes
  std::string description;
};

/// This rank's node: the launcher's GROUP_RANK, the kernel's boot id, the pid namespace and the host name.
/// Empty when the launcher did not set GROUP_RANK (the node cannot be told).
std::string node_identity(const DistEnv& env);

/// Collective over the group behind `store` (size `group_size`, this rank `group_rank`): every rank passes
/// the same mode and its node_identity(). Cross-memory attach when the mode allows and every member shares
/// this node; otherwise, or with `auto` when it cannot be set up, Gloo, on every rank alike. Throws
/// UsageError naming why when system.intra_node=cma and the members share a node but cannot use it.
IntraNodeChoice choose_intra_node_transport(c10d::Store& store, int group_rank, int group_size,
                                            const std::string& own_node, IntraNodeTransport mode,
                                            std::chrono::milliseconds timeout);

}  // namespace meshrun::trainer
