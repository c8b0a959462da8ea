#include "trainer/distributed/communicator.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "common/error.hpp"
#include "trainer/distributed/cma_transport.hpp"
#include "trainer/distributed/intra_node.hpp"
#include "trainer/distributed/nccl_backend.hpp"
#include "trainer/distributed/store_text.hpp"

namespace meshrun::trainer {

struct CmaTicket {
  CmaTicket(std::shared_ptr<CmaTransport> t, uint64_t s) : transport(std::move(t)), seq(s) {}
  ~CmaTicket() {
    if (!done) transport->cancel(seq);  // dropped unfinished: its destinations may be going away
  }
  CmaTicket(const CmaTicket&) = delete;
  CmaTicket& operator=(const CmaTicket&) = delete;
  void complete() {
    transport->complete(seq);
    done = true;
  }
  std::shared_ptr<CmaTransport> transport;
  uint64_t seq;
  bool done = false;
};

namespace {

using Clock = std::chrono::steady_clock;

std::shared_ptr<::gloo::transport::Device> make_gloo_device(const DistEnv& env) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname != '\0') {
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  // A loopback master means a single-node job: bind to loopback instead of resolving the hostname.
  if (env.master_addr.rfind("127.", 0) == 0 || env.master_addr == "localhost") {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

// Waits for `keys`; on timeout names the ranks whose key never appeared.
void wait_for_ranks(c10d::Store& store, const std::vector<std::string>& keys, const std::vector<int>& ranks,
                    std::chrono::milliseconds timeout) {
  try {
    store.wait(keys, timeout);
  } catch (const c10::Error&) {
    std::string missing;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!store.check({keys[i]})) missing += (missing.empty() ? "" : ", ") + std::to_string(ranks[i]);
    }
    throw TimeoutError("start-up check: rank(s) " + (missing.empty() ? std::string("?") : missing) +
                       " did not arrive within system.timeout_s=" + std::to_string(timeout.count() / 1000) +
                       "s (a worker failed to start, or ranks disagree on WORLD_SIZE)");
  }
}

}  // namespace

void check_rank_consistency(c10d::Store& store, const DistEnv& env, const TrainerConfig& config,
                            std::chrono::milliseconds timeout) {
  const nlohmann::json mine = {
      {"world_size", env.world_size}, {"hash", config_hash(config)}, {"config", config.merged}};
  store_set_text(store, "check/rank" + std::to_string(env.rank), mine.dump());

  auto compare = [&](const nlohmann::json& theirs, int their_rank) -> std::string {
    const int theirs_ws = theirs.at("world_size").get<int>();
    if (theirs_ws != env.world_size) {
      return "rank " + std::to_string(their_rank) + " has WORLD_SIZE=" + std::to_string(theirs_ws) + " but rank " +
             std::to_string(env.rank) + " has WORLD_SIZE=" + std::to_string(env.world_size);
    }
    if (theirs.at("hash").get<uint64_t>() != config_hash(config)) {
      return "rank " + std::to_string(their_rank) + "'s config differs from rank " + std::to_string(env.rank) +
             "'s at: " + config_diff(theirs.at("config"), config.merged);
    }
    return "";
  };

  if (env.rank == 0) {
    std::vector<std::string> keys;
    std::vector<int> ranks;
    for (int r = 1; r < env.world_size; ++r) {
      keys.push_back("check/rank" + std::to_string(r));
      ranks.push_back(r);
    }
    std::string verdict;
    try {
      if (!keys.empty()) wait_for_ranks(store, keys, ranks, timeout);
      for (size_t i = 0; i < keys.size() && verdict.empty(); ++i) {
        verdict = compare(nlohmann::json::parse(store_get_text(store, keys[i])), ranks[i]);
      }
    } catch (const TimeoutError& e) {
      verdict = e.what();
    }
    store_set_text(store, "check/verdict", verdict.empty() ? "ok" : verdict);
    if (!verdict.empty()) throw Error("ranks disagree, refusing to start: " + verdict);
    return;
  }
  wait_for_ranks(store, {"check/rank0"}, {0}, timeout);
  const std::string own = compare(nlohmann::json::parse(store_get_text(store, "check/rank0")), 0);
  if (!own.empty()) throw Error("ranks disagree, refusing to start: " + own);
  wait_for_ranks(store, {"check/verdict"}, {0}, timeout);
  const std::string verdict = store_get_text(store, "check/verdict");
  if (verdict != "ok") throw Error("ranks disagree, refusing to start (rank 0's verdict): " + verdict);
}

std::unique_ptr<Communicator> Communicator::create(const DistEnv& env, const TrainerConfig& config,
                                                   const at::Device& device) {
  std::unique_ptr<Communicator> comm(new Communicator(device));
  comm->native_reduce_scatter_ = config.fsdp.native_reduce_scatter;
  if (!env.distributed) return comm;
  comm->rank_ = env.rank;
  comm->world_size_ = env.world_size;
  comm->env_ = env;
  std::vector<int> everyone(static_cast<size_t>(env.world_size));
  for (int r = 0; r < env.world_size; ++r) everyone[static_cast<size_t>(r)] = r;
  comm->ledger_->add_group(comm->ledger_group_, everyone);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(config.system.timeout_s * 1000));

  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(env.master_port);
  options.isServer = false;  // the rendezvous daemon (meshrun-rendezvous) is the server
  options.waitWorkers = false;
  options.timeout = timeout;
  c10::intrusive_ptr<c10d::Store> tcp;
  try {
    tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
  } catch (const c10::Error& e) {
    throw NetworkError("cannot reach the store at " + env.master_addr + ":" + std::to_string(env.master_port) +
                       " (is meshrun-rendezvous running?): " + e.what_without_backtrace());
  }
  comm->store_ = c10::make_intrusive<c10d::PrefixStore>("meshrun/trainer/" + env.restart_count, tcp);
  check_rank_consistency(*comm->store_, env, config, timeout);

  const bool cuda = device.is_cuda();
  const std::string backend = config.system.backend == "auto" ? (cuda ? "nccl" : "gloo") : config.system.backend;
  if (backend == "nccl") {
    if (!cuda) throw UsageError("system.backend=nccl needs system.device=cuda");
    comm->backend_ = make_nccl_backend(c10::make_intrusive<c10d::PrefixStore>("nccl", comm->store_), env.rank,
                                       env.world_size, env.local_rank, timeout);
  } else {
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(timeout);
    gloo_options->devices.push_back(make_gloo_device(env));
    gloo_options->threads = 2;
    comm->backend_ = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>("gloo", comm->store_), env.rank, env.world_size, gloo_options);
  }
  comm->backend_name_ = backend;
  comm->timeout_ = timeout;
  comm->p2p_ = backend == "gloo" && config.fsdp.p2p_collectives;
  comm->intra_node_mode_ = config.system.intra_node;
  comm->node_ = node_identity(env);
  comm->choose_intra_node();
  return comm;
}

std::unique_ptr<Communicator> Communicator::new_group(const std::vector<int>& ranks, const std::string& name) {
  std::unique_ptr<Communicator> group(new Communicator(device_));
  group->native_reduce_scatter_ = native_reduce_scatter_;
  group->p2p_ = p2p_;
  if (!backend_) return group;
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  if (me == ranks.end()) {
    throw Error("internal: rank " + std::to_string(rank_) + " asked to join process group '" + name + "' it is not in");
  }
  group->rank_ = static_cast<int>(me - ranks.begin());
  group->world_size_ = static_cast<int>(ranks.size());
  group->ledger_ = ledger_;
  group->ledger_group_ = name;
  ledger_->add_group(name, ranks);
  group->env_ = env_;
  group->timeout_ = timeout_;
  group->store_ = c10::make_intrusive<c10d::PrefixStore>("group/" + name, store_);
  group->backend_name_ = backend_name_;
  if (backend_name_ == "nccl") {
    group->backend_ = make_nccl_backend(c10::make_intrusive<c10d::PrefixStore>("nccl", group->store_), group->rank_,
                                        group->world_size_, env_.local_rank, timeout_);
  } else {
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(timeout_);
    gloo_options->devices.push_back(make_gloo_device(env_));
    gloo_options->threads = 2;
    group->backend_ = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>("gloo", group->store_), group->rank_, group->world_size_, gloo_options);
  }
  group->intra_node_mode_ = intra_node_mode_;
  group->node_ = node_;
  group->choose_intra_node();
  return group;
}

void Communicator::choose_intra_node() {
  if (backend_name_ != "gloo" || !p2p_) return;  // fsdp.p2p_collectives=false: Gloo's own collectives
  IntraNodeChoice choice = choose_intra_node_transport(*store_, rank_, world_size_, node_, intra_node_mode_, timeout_);
  cma_ = std::move(choice.transport);
  intra_node_ = std::move(choice.description);
}

bool Communicator::on_cma(const at::Tensor& out, const at::Tensor& in) const {
  return cma_ && out.is_cpu() && in.is_cpu() && out.is_contiguous() && in.is_contiguous() && out.dtype() == in.dtype();
}

PendingOp Communicator::all_gather_cma(const at::Tensor& out, const at::Tensor& in) {
  // Every peer copies this rank's `in` into its own slice of `out`; this rank's slice is a local copy.
  PendingOp op{nullptr, out, in, {}};
  const auto bytes = static_cast<size_t>(in.nbytes());
  const uint64_t seq = cma_->post(in.data_ptr(), bytes);
  op.cma = std::make_shared<CmaTicket>(cma_, seq);
  const int64_t n = in.numel();
  for (int peer = 0; peer < world_size_; ++peer) {
    if (peer != rank_) cma_->expect(seq, peer, 0, out.narrow(0, peer * n, n).data_ptr(), bytes);
  }
  out.narrow(0, rank_ * n, n).copy_(in);
  return op;
}

PendingOp Communicator::reduce_scatter_cma(const at::Tensor& out, const at::Tensor& in) {
  // This rank copies its chunk of every peer's `in`: the first into `out`, the others into buffers of their
  // own; wait() adds the own chunk and those, in the order Gloo's point-to-point path adds (same bits).
  PendingOp op{nullptr, out, in, {}};
  const int64_t n = out.numel();
  const auto chunk = static_cast<size_t>(out.nbytes());
  const int first_peer = rank_ == 0 ? 1 : 0;
  std::vector<void*> destinations;  // by peer, allocated before the post: nothing may throw after it
  for (int peer = 0; peer < world_size_; ++peer) {
    if (peer == rank_) continue;
    destinations.push_back(peer == first_peer ? out.data_ptr()
                                              : op.received.emplace_back(at::empty({n}, out.options())).data_ptr());
  }
  const uint64_t seq = cma_->post(in.data_ptr(), static_cast<size_t>(in.nbytes()));
  op.cma = std::make_shared<CmaTicket>(cma_, seq);
  op.cma_reduce = true;
  size_t next = 0;
  for (int peer = 0; peer < world_size_; ++peer) {
    if (peer != rank_) cma_->expect(seq, peer, static_cast<size_t>(rank_) * chunk, destinations[next++], chunk);
  }
  return op;
}

void Communicator::barrier() {
  if (!backend_) return;
  at::Tensor t = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device_));
  PendingOp op = all_reduce(t);
  wait(op);
  (void)t.item<float>();  // NCCL: wait() only orders the stream; the host blocks here
}

std::vector<double> Communicator::sum_over_ranks(std::vector<double> values) {
  if (!backend_ || values.empty()) return values;
  at::Tensor t = at::tensor(values, at::kDouble).to(device_);
  PendingOp op = all_reduce(t);
  wait(op);
  const at::Tensor host = t.to(at::kCPU);
  for (size_t i = 0; i < values.size(); ++i) values[i] = host[static_cast<int64_t>(i)].item<double>();
  return values;
}

int64_t Communicator::broadcast_value(int64_t value, int root) {
  if (!backend_) return value;
  at::Tensor t = at::full({1}, value, at::TensorOptions().dtype(at::kLong).device(device_));
  broadcast(t, root);
  return t.item<int64_t>();
}

std::optional<RankFailure> Communicator::first_failure(const std::string& own_error) {
  const std::string key = "failure/" + std::to_string(failure_seq_++) + "/rank";
  if (!backend_) {
    if (own_error.empty()) return std::nullopt;
    return RankFailure{rank_, own_error};
  }
  // The message goes into the store before the all-reduce, so it is there once anyone learns of it.
  if (!own_error.empty()) store_set_text(*store_, key + std::to_string(rank_), own_error);
  std::vector<double> failed(static_cast<size_t>(world_size_), 0.0);
  if (!own_error.empty()) failed[static_cast<size_t>(rank_)] = 1.0;
  failed = sum_over_ranks(std::move(failed));
  for (int r = 0; r < world_size_; ++r) {
    if (failed[static_cast<size_t>(r)] == 0.0) continue;
    if (r == rank_) return RankFailure{r, own_error};
    try {
      return RankFailure{r, store_get_text(*store_, key + std::to_string(r))};
    } catch (const c10::Error& e) {
      return RankFailure{
          r, std::string("(its message could not be read from the store: ") + e.what_without_backtrace() + ")"};
    }
  }
  return std::nullopt;
}

Communicator::Communicator(const at::Device& device) : device_(device) {}

Communicator::~Communicator() = default;

int64_t Communicator::enter(const char* op, const at::Tensor& t) {
  static const char* fault = std::getenv("MESHRUN_TRAINER_FAULT_SKIP_COLLECTIVE");
  if (fault != nullptr && ledger_group_ == "0") {
    const int64_t next = ledger_->next_seq(ledger_group_);
    if (std::string(fault) == std::to_string(next) + ":" + std::to_string(env_.rank)) {
      std::fprintf(stderr, "test hook: rank %d stops before collective #%lld and never enters it\n", env_.rank,
                   static_cast<long long>(next));
      // A wait nothing in the process ends (a condition nobody notifies): a deadlock, as a hang is, not a sleep
      // loop, which meshrun calls late (docs/progress.md, "Late or hung").
      std::mutex never;
      std::condition_variable nobody;
      std::unique_lock<std::mutex> lock(never);
      nobody.wait(lock, [] { return false; });
    }
  }
  return ledger_->enter(ledger_group_, op, "[[" + std::to_string(t.numel()) + "]]", c10::toString(t.scalar_type()));
}

PendingOp Communicator::all_gather(const at::Tensor& out, const at::Tensor& in) {
  if (!backend_) {
    out.copy_(in);
    return PendingOp{nullptr, out, in, {}};
  }
  const int64_t seq = enter("all_gather", in);
  PendingOp op = all_gather_dispatch(out, in);
  op.ledger_seq = seq;
  return op;
}

PendingOp Communicator::all_gather_dispatch(const at::Tensor& out, const at::Tensor& in) {
  return stages_through_host(out) ? on_host_copies(&Communicator::all_gather_on_backend, out, in)
                                  : all_gather_on_backend(out, in);
}

PendingOp Communicator::on_host_copies(CollectiveFn collective, const at::Tensor& out, const at::Tensor& in) {
  PendingOp op = (this->*collective)(at::empty(out.sizes(), out.options().device(at::kCPU)), in.to(at::kCPU));
  op.host_output = std::exchange(op.output, out);
  op.host_input = std::exchange(op.input, in);
  return op;
}

PendingOp Communicator::all_gather_on_backend(const at::Tensor& out, const at::Tensor& in) {
  if (on_cma(out, in)) return all_gather_cma(out, in);
  PendingOp op{nullptr, out, in, {}};
  if (p2p_ && in.is_contiguous() && out.is_contiguous()) {
    // Receives land in the other ranks' slices of `out`; this rank's slice is a local copy.
    const int tag = static_cast<int>(p2p_tag_++ % (int64_t{1} << 30));
    const int64_t n = in.numel();
    for (int peer = 0; peer < world_size_; ++peer) {
      if (peer == rank_) continue;
      std::vector<at::Tensor> recv{op.output.narrow(0, peer * n, n)};
      op.p2p.push_back(backend_->recv(recv, peer, tag));
    }
    for (int peer = 0; peer < world_size_; ++peer) {
      if (peer == rank_) continue;
      std::vector<at::Tensor> send{op.input};
      op.p2p.push_back(backend_->send(send, peer, tag));
    }
    op.output.narrow(0, rank_ * n, n).copy_(in);
    return op;
  }
  op.work = backend_->_allgather_base(op.output, op.input);
  return op;
}

PendingOp Communicator::reduce_scatter(const at::Tensor& out, const at::Tensor& in) {
  if (!backend_) {
    out.copy_(in);
    return PendingOp{nullptr, out, in, {}};
  }
  const int64_t seq = enter("reduce_scatter", in);
  PendingOp op = stages_through_host(out) ? on_host_copies(&Communicator::reduce_scatter_on_backend, out, in)
                                          : reduce_scatter_on_backend(out, in);
  op.ledger_seq = seq;
  return op;
}

PendingOp Communicator::reduce_scatter_on_backend(const at::Tensor& out, const at::Tensor& in) {
  if (native_reduce_scatter_ && on_cma(out, in)) return reduce_scatter_cma(out, in);
  PendingOp op{nullptr, out, in, {}};
  if (native_reduce_scatter_ && p2p_ && in.is_contiguous() && out.is_contiguous()) {
    // Chunk j of `in` goes to rank j; the other ranks' contributions to this rank's chunk are received
    // into buffers of their own and summed by wait().
    const int tag = static_cast<int>(p2p_tag_++ % (int64_t{1} << 30));
    const int64_t n = out.numel();
    for (int peer = 0; peer < world_size_; ++peer) {
      if (peer == rank_) continue;
      op.received.push_back(at::empty({n}, in.options()));
      std::vector<at::Tensor> recv{op.received.back()};
      op.p2p.push_back(backend_->recv(recv, peer, tag));
    }
    for (int peer = 0; peer < world_size_; ++peer) {
      if (peer == rank_) continue;
      std::vector<at::Tensor> send{op.input.narrow(0, peer * n, n)};
      op.p2p.push_back(backend_->send(send, peer, tag));
    }
    return op;
  }
  if (native_reduce_scatter_) {
    op.work = backend_->_reduce_scatter_base(op.output, op.input);
  } else {
    // Reduce-scatter as all-reduce + keep the local chunk: correct for any backend, 2x the traffic.
    op.staging = in;
    std::vector<at::Tensor> tensors{op.staging};
    op.work = backend_->allreduce(tensors);
  }
  return op;
}

PendingOp Communicator::all_reduce(const at::Tensor& t) {
  PendingOp op{nullptr, t, {}, {}};
  if (!backend_) return op;
  op.ledger_seq = enter("all_reduce", t);
  if (stages_through_host(t)) op.host_output = t.to(at::kCPU);
  std::vector<at::Tensor> tensors{op.host_output.defined() ? op.host_output : t};
  op.work = backend_->allreduce(tensors);
  return op;
}

void Communicator::wait(PendingOp& op) {
  if (op.cma) {
    const auto start = Clock::now();
    op.cma->complete();
    op.cma.reset();
    comm_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  }
  if (op.work || !op.p2p.empty()) {
    const auto start = Clock::now();
    if (op.work) {
      if (backend_name_ == "nccl") {
        wait_timed(*op.work);
      } else {
        op.work->wait();
      }
    }
    for (auto& w : op.p2p) w->wait();
    if (backend_name_ != "nccl") comm_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
    op.work.reset();
    op.p2p.clear();
  }
  // Host-staged (Gloo on CUDA tensors): the arithmetic below runs on the host copies.
  at::Tensor out = op.host_output.defined() ? op.host_output : op.output;
  const at::Tensor in = op.host_input.defined() ? op.host_input : op.input;
  if (op.cma_reduce) {
    // Cross-memory attach: `out` holds the first peer's chunk; first + own == own + first, bit for bit.
    const int64_t n = out.numel();
    out.add_(in.narrow(0, static_cast<int64_t>(rank_) * n, n));
    for (const at::Tensor& r : op.received) out.add_(r);
    op.received.clear();
    op.cma_reduce = false;
  } else if (!op.received.empty()) {
    // Point-to-point reduce-scatter: own chunk plus every other rank's contribution.
    const int64_t n = out.numel();
    at::add_out(out, in.narrow(0, static_cast<int64_t>(rank_) * n, n), op.received[0]);
    for (size_t i = 1; i < op.received.size(); ++i) out.add_(op.received[i]);
    op.received.clear();
  }
  if (op.staging.defined()) {
    const int64_t n = out.numel();
    out.copy_(op.staging.narrow(0, static_cast<int64_t>(rank_) * n, n));
    op.staging = at::Tensor();
  }
  if (op.host_output.defined()) {
    op.output.copy_(op.host_output);
    op.host_output = at::Tensor();
    op.host_input = at::Tensor();
  }
  if (op.ledger_seq > 0) ledger_->complete(ledger_group_, std::exchange(op.ledger_seq, 0));
}

void Communicator::wait_timed(c10d::Work& work) {
  const c10::impl::VirtualGuardImpl cuda(device_.type());
  const c10::Stream stream = cuda.getStream(device_);
  c10::Event before(device_.type(), c10::EventFlag::BACKEND_DEFAULT);
  c10::Event after(device_.type(), c10::EventFlag::BACKEND_DEFAULT);
  before.record(stream);
  work.wait();
  after.record(stream);
  device_waits_.emplace_back(std::move(before), std::move(after));
}

void Communicator::broadcast(const at::Tensor& t, int root) {
  if (!backend_) return;
  const at::Tensor host = stages_through_host(t) ? t.to(at::kCPU) : at::Tensor();
  std::vector<at::Tensor> tensors{host.defined() ? host : t};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  const int64_t seq = enter("broadcast", t);
  const auto start = Clock::now();
  auto work = backend_->broadcast(tensors, opts);
  if (backend_name_ == "nccl") {
    wait_timed(*work);
  } else {
    work->wait();
    comm_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  }
  if (host.defined()) t.copy_(host);
  ledger_->complete(ledger_group_, seq);
}

double Communicator::take_comm_seconds() {
  double s = comm_seconds_;
  comm_seconds_ = 0.0;
  for (auto& [before, after] : device_waits_) {
    after.synchronize();
    s += before.elapsedTime(after) / 1e3;
  }
  device_waits_.clear();
  return s;
}

}  // namespace meshrun::trainer
