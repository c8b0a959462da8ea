// MeshrunHandler: where the network layer (StoreServer) hands each MESHRUN (0x40) JSON request. The
// rendezvous service implements it; it is called on the io thread.
#pragma once

#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

namespace meshrun::rendezvous {

class StoreConnection;

class MeshrunHandler {
 public:
  virtual ~MeshrunHandler() = default;
  /// The reply to `request`, or nullopt when it comes later through connection->finish_await() (an await).
  virtual std::optional<nlohmann::json> handle(const std::shared_ptr<StoreConnection>& connection,
                                               const nlohmann::json& request) = 0;
  /// `connection` closed (its client went away, or the daemon closed it).
  virtual void on_connection_closed(const StoreConnection& connection) = 0;
};

}  // namespace meshrun::rendezvous
