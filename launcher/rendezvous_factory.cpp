#include "launcher/rendezvous_factory.hpp"

#include "launcher/cli/options.hpp"
#include "launcher/etcd/etcd_rendezvous.hpp"
#include "launcher/rdzv/node_rendezvous.hpp"

namespace meshrun::launcher {

std::unique_ptr<RendezvousBackend> make_rendezvous(const LaunchOptions& options, SignalSet& signals) {
  if (options.backend == RdzvBackend::kEtcd) return std::make_unique<EtcdRendezvous>(options, signals);
  return std::make_unique<NodeRendezvous>(options, signals);
}

}  // namespace meshrun::launcher
