// Communicator: the process group the FSDP layer talks to. It bootstraps from DistEnv through a c10d
// TCPStore client pointed at the rendezvous daemon (MASTER_ADDR:MASTER_PORT), checks that every rank
// runs the same config and world size, then builds ProcessGroupGloo (CPU) or ProcessGroupNCCL (CUDA).
// A single process gets a communicator whose collectives are local copies. With Gloo, the all-gathers and
// reduce-scatters of a group whose ranks all run under this node's launcher go through cross-memory attach
// (intra_node.hpp, cma_transport.hpp) instead of loopback sockets: system.intra_node.
//
// Every collective takes tensors on the training device. NCCL works on them directly; Gloo on CUDA tensors
// (two ranks sharing a GPU, where NCCL refuses) copies them through host memory. Scalars the trainer
// agrees on (losses, flags, verdicts) go through sum_over_ranks / broadcast_value, which put them on the
// device the backend needs, so the CPU tests run the same code as GPU jobs.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "trainer/config/trainer_config.hpp"
#include "trainer/distributed/collective_ledger.hpp"
#include "trainer/distributed/dist_env.hpp"

namespace c10d {
class Backend;
class Store;
}  // namespace c10d

namespace meshrun::trainer {

class CmaTransport;
struct CmaTicket;  // a collective in flight on the cross-memory-attach transport (communicator.cpp)

/// An issued collective. Tensors are kept alive until the work completes.
struct PendingOp {
  PendingOp() = default;
  PendingOp(c10::intrusive_ptr<c10d::Work> w, at::Tensor out, at::Tensor in, at::Tensor stage)
      : work(std::move(w)), output(std::move(out)), input(std::move(in)), staging(std::move(stage)) {}

  c10::intrusive_ptr<c10d::Work> work;
  at::Tensor output;
  at::Tensor input;
  at::Tensor staging;  // reduce-scatter fallback: the full all-reduced buffer
  // Point-to-point collectives: every send and receive, and for a reduce-scatter the other ranks'
  // contributions to this rank's chunk, summed into `output` by wait().
  std::vector<c10::intrusive_ptr<c10d::Work>> p2p;
  std::vector<at::Tensor> received;
  // Gloo on CUDA tensors: the host copies the collective really runs on; wait() copies host_output back
  // into `output`.
  at::Tensor host_output;
  at::Tensor host_input;
  // Cross-memory attach: the copies out of the peers' inputs. For a reduce-scatter `output` receives the
  // first peer's chunk and `received` the others'; wait() adds this rank's own chunk and those.
  std::shared_ptr<CmaTicket> cma;
  bool cma_reduce = false;
  int64_t ledger_seq = 0;  // its number in the CollectiveLedger (0: not recorded)
  bool valid() const { return output.defined(); }
};

/// A step that every rank took (writing its part of a checkpoint, say) and that failed somewhere.
struct RankFailure {
  int rank = -1;        // the lowest failing rank of the group
  std::string message;  // that rank's own error message
};

class Communicator {
 public:
  /// Single process, or store + consistency check + backend. Throws UsageError / TimeoutError /
  /// meshrun::Error with the culprit named.
  static std::unique_ptr<Communicator> create(const DistEnv& env, const TrainerConfig& config,
                                              const at::Device& device);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::string& backend_name() const { return backend_name_; }
  /// How all-gathers and reduce-scatters move between this node's ranks: "cross-memory attach", or "sockets
  /// (why)"; empty for NCCL and single processes.
  const std::string& intra_node_transport() const { return intra_node_; }
  /// The training device: where collectives expect their tensors.
  const at::Device& device() const { return device_; }

  /// out[world*n] <- concat of every rank's in[n]. With Gloo (fsdp.p2p_collectives) every rank sends its
  /// `in` to each other rank, which receives it straight into its slice of `out`: no staging buffer, no copy.
  PendingOp all_gather(const at::Tensor& out, const at::Tensor& in);
  /// out[n] <- rank's chunk of the sum over ranks of in[world*n]. With Gloo (fsdp.p2p_collectives) every
  /// rank sends chunk j of `in` to rank j and wait() sums the received chunks into `out`: each rank sends
  /// (world-1)/world of `in`, half of what Gloo's own reduce-scatter moves (measured on loopback).
  PendingOp reduce_scatter(const at::Tensor& out, const at::Tensor& in);
  /// t <- sum over ranks of t.
  PendingOp all_reduce(const at::Tensor& t);
  /// Blocks until `op` completes; the blocked time counts as exposed communication.
  void wait(PendingOp& op);
  void broadcast(const at::Tensor& t, int root);
  /// Returns when every rank of this group has called it.
  void barrier();
  /// Element-wise sum over ranks of a few numbers (one all-reduce on the backend's device).
  std::vector<double> sum_over_ranks(std::vector<double> values);
  /// `root`'s value on every rank.
  int64_t broadcast_value(int64_t value, int root);
  /// Every rank passes its outcome of a step they all took ("" = success) and learns the group's: nullopt
  /// when every rank succeeded, else the lowest failing rank and its message. Collective: one all-reduce of
  /// world_size flags; the failing ranks' messages travel through the store, so each rank can name the
  /// culprit instead of hanging in a later collective until system.timeout_s.
  std::optional<RankFailure> first_failure(const std::string& own_error);
  /// A process group over `ranks` (global ranks, this rank among them) built over the same store under
  /// the prefix `name`; every member must call it with the same arguments, non-members must not.
  /// Single-process communicators return another single-process communicator.
  std::unique_ptr<Communicator> new_group(const std::vector<int>& ranks, const std::string& name);

  /// Seconds of exposed (not overlapped) communication since the last call. CPU: time blocked in wait().
  /// NCCL: wait() only makes the compute stream wait for the NCCL stream, so the time is the gap between CUDA
  /// events recorded on the compute stream right before and after that wait, read here (it synchronizes).
  double take_comm_seconds();
  /// Every collective of this communicator and of the groups made from it (collective_ledger.hpp).
  std::shared_ptr<const CollectiveLedger> ledger() const { return ledger_; }

 private:
  explicit Communicator(const at::Device& device);  // out of line: members need c10d's complete types
  /// Gloo cannot read CUDA memory: collectives on CUDA tensors run on host copies.
  bool stages_through_host(const at::Tensor& t) const { return backend_name_ == "gloo" && t.is_cuda(); }
  using CollectiveFn = PendingOp (Communicator::*)(const at::Tensor& out, const at::Tensor& in);
  PendingOp all_gather_dispatch(const at::Tensor& out, const at::Tensor& in);
  PendingOp all_gather_on_backend(const at::Tensor& out, const at::Tensor& in);
  PendingOp reduce_scatter_on_backend(const at::Tensor& out, const at::Tensor& in);
  /// Gloo groups: picks cross-memory attach when every member runs under this node's launcher.
  void choose_intra_node();
  bool on_cma(const at::Tensor& out, const at::Tensor& in) const;
  PendingOp all_gather_cma(const at::Tensor& out, const at::Tensor& in);
  PendingOp reduce_scatter_cma(const at::Tensor& out, const at::Tensor& in);
  /// Runs `collective` on host copies of `out` and `in`; wait() copies the result back into `out`.
  PendingOp on_host_copies(CollectiveFn collective, const at::Tensor& out, const at::Tensor& in);
  /// NCCL: records the compute stream's wait for `work` between two timing events.
  void wait_timed(c10d::Work& work);
  /// Records a collective entered on this group in the ledger: its sequence number. The test hook
  /// MESHRUN_TRAINER_FAULT_SKIP_COLLECTIVE=SEQ:RANK stops that rank before collective SEQ of the default
  /// group, which it then never enters (the hang tests).
  int64_t enter(const char* op, const at::Tensor& t);

  int rank_ = 0;
  int world_size_ = 1;
  std::string backend_name_ = "none";
  at::Device device_;
  DistEnv env_;
  std::chrono::milliseconds timeout_{0};
  bool native_reduce_scatter_ = true;
  bool p2p_ = false;         // all-gather / reduce-scatter as sends and receives (Gloo)
  int64_t p2p_tag_ = 0;      // the same sequence on every rank: collectives are issued in the same order
  int64_t failure_seq_ = 0;  // first_failure() calls so far (the same on every rank): its store keys
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  IntraNodeTransport intra_node_mode_ = IntraNodeTransport::kAuto;
  std::string node_;  // node_identity(): equal for ranks under the same launcher
  std::string intra_node_;
  std::shared_ptr<CmaTransport> cma_;
  double comm_seconds_ = 0.0;
  std::vector<std::pair<c10::Event, c10::Event>> device_waits_;                      // NCCL: (before, after) each wait
  std::shared_ptr<CollectiveLedger> ledger_ = std::make_shared<CollectiveLedger>();  // shared with its groups
  std::string ledger_group_ = "0";                                                   // this group's name there
};

/// Publishes this rank's world size and merged config under the store and compares: rank 0 checks every
/// rank and publishes a verdict, the others compare with rank 0 and wait for it. Throws meshrun::Error
/// naming the rank and the differing keys, or TimeoutError naming the ranks that never arrived.
void check_rank_consistency(c10d::Store& store, const DistEnv& env, const TrainerConfig& config,
                            std::chrono::milliseconds timeout);

}  // namespace meshrun::trainer
