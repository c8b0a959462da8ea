// MeshrunHandler: where the network layer (StoreServer) hands each MESHRUN (0x40) JSON request. The
// rendezvous service implements it; it is called on the io thread.
#pragma once

#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

namespace meshrun::rendezvous {

class Session;

class MeshrunHandler {
 public:
  virtual ~MeshrunHandler() = default;
  /// The reply to `request`, or nullopt when it comes later through session->finish_await() (an await).
  virtual std::optional<nlohmann::json> handle(const std::shared_ptr<Session>& session,
                                               const nlohmann::json& request) = 0;
  /// `session` closed (its client went away, or the daemon closed it).
  virtual void on_session_closed(const Session& session) = 0;
};

}  // namespace meshrun::rendezvous
