// The rendezvous factory: which RendezvousBackend --rdzv-backend asks for. Kept apart from the interface
// so that the interface's users (the agent's loop, the heartbeat keeper) do not see the implementations.
#pragma once

#include <memory>

#include "common/signal_set.hpp"
#include "launcher/rdzv/rendezvous_backend.hpp"

namespace meshrun::launcher {

struct LaunchOptions;

/// The backend --rdzv-backend asks for, connected (or hosting) and ready to join.
std::unique_ptr<RendezvousBackend> make_rendezvous(const LaunchOptions& options, SignalSet& signals);

}  // namespace meshrun::launcher
