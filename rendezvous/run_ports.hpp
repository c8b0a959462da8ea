// RunPorts: all the rendezvous service may ask of the network layer: a private store port per run (an
// isolated key space for its workers), and the counts it reports in status. StoreServer implements it;
// it is called on the io thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace meshrun::rendezvous {

class RunPorts {
 public:
  virtual ~RunPorts() = default;
  virtual bool has_run_port(const std::string& run_id) const = 0;
  /// Listens on a fresh port for the run's store and returns it. Throws NetworkError when it cannot.
  virtual uint16_t open_run_port(const std::string& run_id) = 0;
  /// Closes a finished run's port and drops its store; false when the run had none.
  virtual bool close_run_port(const std::string& run_id) = 0;
  /// Keys in the run's store (0 when it has none), or in the shared (main port) store for "".
  virtual size_t key_count(const std::string& run_id) const = 0;
  virtual size_t connection_count() const = 0;
};

}  // namespace meshrun::rendezvous
