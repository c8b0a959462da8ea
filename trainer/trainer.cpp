#include "trainer/trainer.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "common/error.hpp"
#include "common/strings.hpp"
#include "proto/worker/memory_copy.hpp"
#include "trainer/checkpoint/async_writer.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/checkpoint/checkpoint_files.hpp"
#include "trainer/checkpoint/hf_import.hpp"
#include "trainer/checkpoint/memory_checkpointer.hpp"
#include "trainer/checkpoint/memory_restore.hpp"
#include "trainer/data/dataset.hpp"
#include "trainer/distributed/communicator.hpp"
#include "trainer/distributed/nccl_backend.hpp"
#include "trainer/faults/fault_hooks.hpp"
#include "trainer/fsdp/adamw.hpp"
#include "trainer/fsdp/sharded_model.hpp"
#include "trainer/metrics.hpp"
#include "trainer/preemption.hpp"

namespace meshrun::trainer {
namespace {

using Clock = std::chrono::steady_clock;

at::Device pick_device(const SystemConfig& system, const DistEnv& env) {
  // libtorch_cuda comes with the CUDA plugin: a CPU run never loads it.
  const bool cuda_available = load_cuda_plugin(system.device) && at::hasCUDA();
  if (system.device == "cuda" && !cuda_available) {
    throw UsageError("system.device=cuda but no CUDA device is usable in this process: use system.device=cpu");
  }
  if (system.device != "cuda" && !(system.device == "auto" && cuda_available)) return {at::kCPU};
  const auto* cuda = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  const int count = static_cast<int>(cuda->deviceCount());
  int index = env.local_rank;
  if (index >= count) {
    // NCCL refuses two ranks on one GPU; Gloo (through host memory) does not, which tests use.
    if (system.backend != "gloo") {
      throw UsageError("LOCAL_RANK=" + std::to_string(env.local_rank) + " but this process sees " +
                       std::to_string(count) +
                       " CUDA device(s): lower --nproc-per-node (or check CUDA_VISIBLE_DEVICES); ranks can share a GPU "
                       "only with system.backend=gloo");
    }
    index %= count;
  }
  const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
  cuda->setDevice(device);  // kernels and the caching allocator default to this rank's GPU
  return device;
}

// Bytes held by tensors now: the CUDA caching allocator's count on a GPU, the C heap on the CPU.
int64_t tensor_bytes_in_use(const at::Device& device) {
  return device.is_cuda() ? cuda_memory_stats(device.index()).allocated : heap_in_use_bytes();
}

void set_threads(const SystemConfig& system, const DistEnv& env) {
  int threads = static_cast<int>(system.threads);
  if (threads == 0) {
    if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp != nullptr && std::atoi(omp) > 0) {
      threads = std::atoi(omp);
    } else {
      // Workers on one node share its cores; oversubscription costs more than it gains.
      threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, env.local_world_size));
    }
  }
  at::set_num_threads(threads);
}

// Threads first (the intra-op pool starts with the first parallel op), then the device.
at::Device prepare_device(const SystemConfig& system, const DistEnv& env) {
  set_threads(system, env);
  return pick_device(system, env);
}

at::Tensor to_tensor(const std::vector<int64_t>& v, int64_t rows, int64_t cols) {
  return at::tensor(v, at::kLong).view({rows, cols});
}

double mean_over_ranks(Communicator& comm, double local) { return comm.sum_over_ranks({local})[0] / comm.world_size(); }

// What every rank says at the end of a step, summed over ranks in one all-reduce (Trainer::step).
struct StepSums {
  double loss = 0;                   // this rank's loss: the sum is the mean times the world size
  double preempted = 0;              // 1 when this rank got a preemption signal
  std::array<double, 2> save{0, 0};  // the background save's status (AsyncCheckpointer::status)
  std::array<double, 2> copy{0, 0};  // the copy in memory's (MemoryCheckpointer::status)

  StepSums over_ranks(Communicator& comm) const {
    const auto s = comm.sum_over_ranks({loss, preempted, save[0], save[1], copy[0], copy[1]});
    return {s[0], s[1], {s[2], s[3]}, {s[4], s[5]}};
  }
};

void log_checkpoint(MetricsLog& log, bool rank0, const char* what, const CheckpointStats& s) {
  if (!rank0) return;
  const double gbps = s.seconds > 0 ? static_cast<double>(s.bytes) / s.seconds / 1e9 : 0.0;
  char blocked[64] = "";
  if (s.async) std::snprintf(blocked, sizeof(blocked), "; training blocked %.1f ms", s.blocked_seconds * 1e3);
  std::printf("checkpoint: %s %s%s (%s in %.3f s, %.2f GB/s%s)\n", what, s.path.c_str(),
              s.async ? " in the background" : "", format_bytes(static_cast<double>(s.bytes)).c_str(), s.seconds, gbps,
              blocked);
  std::fflush(stdout);
  nlohmann::json event = {{"event", std::string("checkpoint_") + what},
                          {"path", s.path},
                          {"bytes", s.bytes},
                          {"seconds", s.seconds},
                          {"gb_per_s", gbps}};
  if (std::string(what) == "saved") {
    event["async"] = s.async;
    event["blocked_s"] = s.blocked_seconds;
    if (s.async) {
      event["snapshot_wait_s"] = s.snapshot_wait_seconds;
      event["written_during_step"] = s.written_during_step;
    }
  }
  log.log_event(event);
}

at::Tensor loss_of(ShardedModel& model, const MicroBatch& mb, int64_t vocab) {
  // The loss is always computed in fp32, whatever the compute dtype. The compute-dtype logits are not kept:
  // at the loss's peak they would sit beside their fp32 copy and its log-softmax (4 GB for 1b at 16k tokens).
  at::Tensor logits = model.forward(to_tensor(mb.inputs, mb.batch, mb.seq_len)).to(at::kFloat);
  at::Tensor targets = to_tensor(mb.targets, mb.batch, mb.seq_len).to(logits.device());
  return at::cross_entropy_loss(logits.view({-1, vocab}), targets.view({-1}));
}

double mean_val_loss(ShardedModel& model, Communicator& comm, const TokenDataset& data, const TrainerConfig& c) {
  c10::NoGradGuard no_grad;
  double sum = 0;
  for (int64_t i = 0; i < c.train.eval_batches; ++i) {
    const auto mb = sample_micro_batch(data, Split::kVal, c.train.seed, i, 0, c.train.global_batch_size,
                                       c.train.seq_len, comm.rank(), comm.world_size());
    sum += loss_of(model, mb, c.model.vocab_size).item<double>();
  }
  model.reshard_all();
  return mean_over_ranks(comm, sum / static_cast<double>(c.train.eval_batches));
}

// Temperature sampling; rank 0 draws and broadcasts so every rank feeds the same context.
std::vector<int64_t> sample(ShardedModel& model, Communicator& comm, const TrainerConfig& c,
                            std::vector<int64_t> context) {
  c10::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(c.train.seed + 7);
  std::vector<int64_t> produced;
  for (int64_t i = 0; i < c.train.sample_tokens; ++i) {
    const int64_t window = std::min<int64_t>(static_cast<int64_t>(context.size()), c.model.max_seq_len);
    std::vector<int64_t> tail(context.end() - window, context.end());
    at::Tensor logits = model.forward(to_tensor(tail, 1, window));
    at::Tensor last = logits.select(1, window - 1).to(at::kCPU, at::kFloat).squeeze(0);
    at::Tensor probs = at::softmax(last / 0.8, -1);
    const int64_t next = at::multinomial(probs, 1, false, gen).item<int64_t>();
    context.push_back(comm.broadcast_value(next, 0));
    produced.push_back(context.back());
  }
  model.reshard_all();
  return produced;
}

}  // namespace

Trainer::Trainer(const TrainerConfig& config, const DistEnv& env)
    : config_(config),
      preemption_(config.checkpoint.on_signal && !config.checkpoint.dir.empty()),
      device_(prepare_device(config.system, env)),
      comm_(Communicator::create(env, config, device_)),
      collectives_(std::make_unique<CollectiveReporter>(progress_socket_from_env(), comm_->ledger())) {
  const TrainerConfig& c = config_;
  const int world = comm_->world_size();
  if (c.train.global_batch_size % world != 0) {
    throw UsageError("train.global_batch_size (" + std::to_string(c.train.global_batch_size) +
                     ") must be divisible by WORLD_SIZE (" + std::to_string(world) + ")");
  }
  data_ = std::make_unique<TokenDataset>(c.data);
  if (c.data.format != "text" && data_->max_token_sampled() >= c.model.vocab_size) {
    throw UsageError("data.path holds token id " + std::to_string(data_->max_token_sampled()) +
                     " but model.vocab_size is " + std::to_string(c.model.vocab_size));
  }
  if (!c.output.dir.empty()) std::filesystem::create_directories(c.output.dir);
  start_rss_ = current_rss_bytes();  // memory benchmarks report what the model and training add above this
  model_ = std::make_unique<ShardedModel>(c, *comm_, device_, env.local_world_size);
  optimizer_ = std::make_unique<AdamW>(c.train, model_->units());
  flops_per_token_ = train_flops_per_token(c.model, c.train.seq_len);
  tokens_per_step_ = c.train.global_batch_size * c.train.seq_len * c.train.grad_accum_steps;
  const bool rank0 = comm_->rank() == 0;
  log_ = std::make_unique<MetricsLog>(rank0 && !c.output.dir.empty() ? c.output.dir + "/metrics.jsonl" : "",
                                      c.output.progress_bar && rank0, c.train.steps);
  if (c.checkpoint.async && !c.checkpoint.dir.empty())
    async_saves_ = std::make_unique<AsyncCheckpointer>(c, *model_, *optimizer_, *comm_, training_step_);
  restarted_ = env.restart_count != "0";
  if (c.checkpoint.memory_interval > 0) {
    const char* socket = std::getenv(proto::kMemoryEnv);
    if (socket != nullptr && *socket != '\0') {
      memory_saves_ = MemoryCheckpointer::create(c, *model_, *optimizer_, *comm_, socket, training_step_);
    } else if (rank0) {
      std::printf("checkpoint: checkpoint.memory_interval needs meshrun (%s is unset): no copies in memory\n",
                  proto::kMemoryEnv);
    }
  }
  if (rank0) {
    std::printf(
        "meshrun-trainer: model %s, %.2fM params, %d rank(s), %s, %s, param %s, reduce %s, %lld tokens/step, "
        "data %s (%lld tokens, %zu file(s))\n",
        c.model.name.c_str(), static_cast<double>(model_->numel()) / 1e6, world, comm_->backend_name().c_str(),
        model_->layout().c_str(), to_string(c.fsdp.param_dtype).c_str(), to_string(c.fsdp.reduce_dtype).c_str(),
        static_cast<long long>(tokens_per_step_), c.data.path.c_str(), static_cast<long long>(data_->size()),
        data_->files().size());
    if (!model_->intra_node_transport().empty())
      std::printf("intra-node all-gather/reduce-scatter: %s\n", model_->intra_node_transport().c_str());
    std::fflush(stdout);
  }
}

Trainer::~Trainer() = default;

int64_t Trainer::load() {
  const bool rank0 = comm_->rank() == 0;
  std::string resume_from = config_.checkpoint.resume;
  // A restart with copies in memory falls back to the newest complete storage checkpoint, if any.
  if (memory_saves_ && restarted_ && resume_from.empty() && !config_.checkpoint.dir.empty()) resume_from = "auto";
  const bool automatic = resume_from == "auto";
  if (automatic) resume_from = latest_checkpoint(config_.checkpoint.dir).value_or("");
  if (memory_saves_) {
    if (const auto first_step = restore_from_memory(resume_from)) return *first_step;
  }
  if (rank0 && automatic && resume_from.empty())
    std::printf("checkpoint: nothing to resume in %s, starting fresh\n", config_.checkpoint.dir.c_str());
  if (resume_from.empty()) {
    if (!config_.model.init_from.empty()) init_from_hf_weights();
    return 1;
  }
  if (rank0 && !config_.model.init_from.empty())
    std::printf("checkpoint: resuming %s, so model.init_from is not read\n", resume_from.c_str());
  CheckpointStats loaded;
  load_source_ = "storage";
  const TrainState state = load_checkpoint(resume_from, config_, *model_, *optimizer_, *comm_, &loaded);
  log_checkpoint(*log_, rank0, "loaded", loaded);
  return state.step + 1;
}

std::optional<int64_t> Trainer::restore_from_memory(const std::string& resume_from) {
  const bool rank0 = comm_->rank() == 0;
  std::optional<int64_t> storage_step;
  if (!resume_from.empty()) storage_step = step_of_folder(std::filesystem::path(resume_from).filename().string());
  const MemoryRestore restored =
      trainer::restore_from_memory(memory_saves_->link(), config_, *model_, *optimizer_, *comm_, storage_step);
  if (!restored.state) {
    if (rank0 && restarted_ && !restored.why_not.empty()) {
      std::printf("checkpoint: nothing restored from memory: %s; %s\n", restored.why_not.c_str(),
                  resume_from.empty() ? "starting fresh" : ("loading " + resume_from).c_str());
      std::fflush(stdout);
    }
    return std::nullopt;
  }
  load_source_ = restored.fetched_ranks > 0 ? "memory (buddy)" : "memory";
  if (rank0) {
    const CheckpointStats& s = restored.stats;
    const int world = comm_->world_size();
    std::string sources = restored.fetched_ranks == 0
                              ? "every rank from its own agent"
                              : std::to_string(world - restored.fetched_ranks) + " rank(s) from their own agents, " +
                                    std::to_string(restored.fetched_ranks) +
                                    " from another node's (a lost node's copies, from its buddy)";
    if (restored.resharded_from > 0)
      sources = "resharded from " + std::to_string(restored.resharded_from) + " ranks to " + std::to_string(world) +
                "; " + std::to_string(restored.fetched_ranks) + " rank(s) fetched copies from other nodes";
    std::string lost;
    if (restored.steps_done > restored.state->step)
      lost = "; the run had reached step " + std::to_string(restored.steps_done) + ": " +
             std::to_string(restored.steps_done - restored.state->step) + " step(s) to do again";
    std::printf("checkpoint: restored step %lld from memory (%s) in %.3f s, %s%s\n",
                static_cast<long long>(restored.state->step), sources.c_str(), s.seconds,
                format_bytes(static_cast<double>(s.bytes)).c_str(), lost.c_str());
    std::fflush(stdout);
    log_->log_event({{"event", "checkpoint_restored"},
                     {"source", "memory"},
                     {"fetched_ranks", restored.fetched_ranks},
                     {"step", restored.state->step},
                     {"bytes", s.bytes},
                     {"seconds", s.seconds}});
  }
  return restored.state->step + 1;
}

void Trainer::init_from_hf_weights() {
  const HfInitStats s = init_from_hf(config_, *model_, *comm_);
  init_bytes_read_ = s.bytes_read;
  if (comm_->rank() != 0) return;
  std::printf("init: %lld tensors (%s) from %s in %.3f s; this rank read %s of %s read by all ranks\n",
              static_cast<long long>(s.tensors), s.dtypes.c_str(), s.folder.c_str(), s.seconds,
              format_bytes(static_cast<double>(s.bytes_read)).c_str(),
              format_bytes(static_cast<double>(s.bytes_total)).c_str());
  for (const auto& name : s.unread)
    std::printf("init: %s not used: tie_word_embeddings is true (the head is the embedding)\n", name.c_str());
  std::fflush(stdout);
  log_->log_event({{"event", "init_from"},
                   {"folder", s.folder},
                   {"tensors", s.tensors},
                   {"dtypes", s.dtypes},
                   {"bytes_all_ranks", s.bytes_total},
                   {"seconds", s.seconds}});
}

StepResult Trainer::step(int64_t step) {
  const TrainerConfig& c = config_;
  const auto start = Clock::now();
  training_step_.store(step);
  comm_->take_comm_seconds();
  const double lr = learning_rate(c.train, step);
  optimizer_->zero_grad();
  double local_loss = 0;
  for (int64_t micro = 0; micro < c.train.grad_accum_steps; ++micro) {
    model_->set_requires_grad_sync(micro + 1 == c.train.grad_accum_steps);
    const auto mb = sample_micro_batch(*data_, Split::kTrain, c.train.seed, step - 1, micro * c.train.global_batch_size,
                                       c.train.global_batch_size, c.train.seq_len, comm_->rank(), comm_->world_size());
    const int64_t bytes_before = tensor_bytes_in_use(device_);
    at::Tensor loss = loss_of(*model_, mb, c.model.vocab_size) / static_cast<double>(c.train.grad_accum_steps);
    // What the forward left alive for backward: saved activations (+ gathered parameters, which
    // activation checkpointing does not change).
    activation_peak_ = std::max(activation_peak_, tensor_bytes_in_use(device_) - bytes_before);
    loss.backward();
    local_loss += loss.item<double>();
    int64_t accum = 0;
    for (auto* u : model_->units()) accum += u->unsharded_grad_bytes();
    grad_accum_peak_ = std::max(grad_accum_peak_, accum);
  }
  model_->finish_grad_sync();
  const double norm = optimizer_->global_grad_norm(model_->norm_group());
  optimizer_->clip(norm, c.train.grad_clip);
  if (async_saves_) async_saves_->before_update();    // the snapshot of a background save is taken
  if (memory_saves_) memory_saves_->before_update();  // the copy in memory is sealed
  optimizer_->step(lr);
  // One all-reduce: the loss averaged over ranks; whether any rank got a preemption signal, so every rank
  // stops after the same step; the background save's status, so every rank sees it complete (or fail) at
  // the same step; and whether this rank's copy in memory is sealed and its last committed copy on its buddy
  // node (every rank commits, and declares durable, at the same step).
  StepSums mine;
  mine.loss = local_loss;
  mine.preempted = preemption_.poll() != 0 ? 1.0 : 0.0;
  if (async_saves_) mine.save = async_saves_->status();
  if (memory_saves_) mine.copy = memory_saves_->status();
  const StepSums sums = mine.over_ranks(*comm_);
  const double loss = sums.loss / comm_->world_size();
  const bool stop = sums.preempted > 0;
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

  StepRecord r;
  r.step = step;
  r.loss = loss;
  r.lr = lr;
  r.grad_norm = norm;
  r.step_time_s = seconds;
  r.tokens_per_s = static_cast<double>(tokens_per_step_) / seconds;
  r.flops_per_s = r.tokens_per_s * flops_per_token_;
  r.mfu = r.flops_per_s / (c.system.peak_flops * comm_->world_size());
  r.comm_share = comm_->take_comm_seconds() / seconds;
  if (comm_->rank() == 0) log_->log_step(r, step % c.train.log_interval == 0 || step == 1 || step == c.train.steps);
  // Test hook: this rank beats SECONDS late (the others already wait for it in the next step) and stops itself.
  const auto stop_in = fault_seconds("MESHRUN_TRAINER_FAULT_STOP_AFTER_STEP", {step, comm_->rank()});
  if (stop_in) {
    std::fprintf(stderr, "test hook: rank %d stops itself (SIGSTOP) %.1f s after step %lld\n", comm_->rank(), *stop_in,
                 static_cast<long long>(step));
    std::this_thread::sleep_for(std::chrono::duration<double>(*stop_in));
  }
  beats_.step_done(step, loss, r.tokens_per_s, seconds * (1.0 - r.comm_share));
  if (async_saves_) {
    if (const auto saved = async_saves_->advance(sums.save[0], sums.save[1]))
      log_checkpoint(*log_, comm_->rank() == 0, "saved", *saved);
  }
  if (memory_saves_) {
    if (const auto copy = memory_saves_->advance(sums.copy[0], sums.copy[1])) log_memory_copy(*copy);
  }
  kill_if_asked("MESHRUN_TRAINER_FAULT_KILL_AFTER_STEP", {step, comm_->rank()});
  if (stop_in) ::raise(SIGSTOP);
  hold_if_asked("MESHRUN_TRAINER_HOLD_AFTER_STEP", {step, comm_->rank()});
  busy_if_asked("MESHRUN_TRAINER_FAULT_BUSY_AFTER_STEP", {step, comm_->rank()});
  return {loss, stop};
}

void Trainer::log_memory_copy(const MemoryCopyStats& copy) {
  if (comm_->rank() != 0) return;
  if (!copy.committed) {
    const auto line =
        incomplete_copies_.occurred("checkpoint: the copy in memory of step " + std::to_string(copy.step) +
                                    " is not complete on every rank (their stderr says why); the "
                                    "previous step stands");
    if (line) {
      std::printf("%s\n", line->c_str());
      std::fflush(stdout);
    }
  }
  log_->log_event({{"event", "memory_copy"},
                   {"step", copy.step},
                   {"bytes", copy.bytes},
                   {"copy_s", copy.copy_seconds},
                   {"blocked_s", copy.blocked_seconds},
                   {"sealed_during_step", copy.sealed_during_step},
                   {"skipped", copy.skipped},
                   {"committed", copy.committed}});
}

void Trainer::copy_to_memory(int64_t step) {
  const int64_t every = config_.checkpoint.memory_interval;
  if (!memory_saves_ || step % every != 0 || step >= config_.train.steps) return;
  memory_saves_->start({step, optimizer_->steps_taken()});
}

double Trainer::evaluate(int64_t step) {
  beats_.phase(step, "eval");
  return mean_val_loss(*model_, *comm_, *data_, config_);
}

void Trainer::save(int64_t step, SaveMode mode) {
  beats_.phase(step, "checkpoint");
  save_state(step, mode);
  beats_.phase(step, proto::kTrainPhase);  // the save is over: the agent's goodput ledger ends the phase here
}

void Trainer::save_state(int64_t step, SaveMode mode) {
  const bool rank0 = comm_->rank() == 0;
  TrainState state;
  state.step = step;
  state.optimizer_steps = optimizer_->steps_taken();
  if (async_saves_ && mode == SaveMode::kBackground) {
    const auto started = async_saves_->start(state);
    if (started.previous) {
      log_checkpoint(*log_, rank0, "saved", *started.previous);
      if (rank0) {
        std::printf(
            "checkpoint: waited %.3f s for the background save of %s before starting step %lld's (at most "
            "one save in flight)\n",
            started.waited_seconds, started.previous->path.c_str(), static_cast<long long>(step));
        std::fflush(stdout);
        log_->log_event({{"event", "checkpoint_wait"}, {"step", step}, {"seconds", started.waited_seconds}});
      }
    }
    return;
  }
  finish_background_save();
  log_checkpoint(*log_, rank0, "saved", save_checkpoint(config_, *model_, *optimizer_, *comm_, state));
}

void Trainer::finish_background_save() {
  if (!async_saves_) return;
  if (const auto saved = async_saves_->finish()) log_checkpoint(*log_, comm_->rank() == 0, "saved", *saved);
}

TrainSummary Trainer::run() {
  const TrainerConfig& c = config_;
  const bool rank0 = comm_->rank() == 0;
  TrainSummary summary;
  beats_.phase(0, "load");  // the agent times a restart's load phase from these two beats
  summary.first_step = load();
  if (memory_saves_) memory_saves_->resumed_from(summary.first_step - 1, load_source_);
  beats_.phase(summary.first_step - 1, "ready");
  const auto start = Clock::now();
  for (int64_t step = summary.first_step; step <= c.train.steps; ++step) {
    const StepResult result = this->step(step);
    summary.losses.push_back(result.loss);
    if (c.train.eval_interval > 0 && (step % c.train.eval_interval == 0 || step == c.train.steps)) {
      summary.last_val_loss = evaluate(step);
      if (rank0) log_->log_eval(step, summary.last_val_loss);
    }
    if (result.stop_requested) {
      if (rank0)
        std::printf("checkpoint: preemption signal received, checkpointing after step %lld and stopping\n",
                    static_cast<long long>(step));
      preemption_.stopping();
      save(step);
      summary.stopped_by_signal = preemption_.poll() != 0 ? preemption_.poll() : SIGUSR1;  // another rank's signal
      return summary;
    }
    const bool periodic = c.checkpoint.interval > 0 && step % c.checkpoint.interval == 0;
    const bool final = step == c.train.steps && c.checkpoint.save_final;
    if (!c.checkpoint.dir.empty() && (periodic || final))
      save(step, final ? SaveMode::kBlocking : SaveMode::kBackground);
    copy_to_memory(step);
  }
  // train.steps=0: the initial state (model.init_from's weights, say) becomes checkpoint step 0.
  if (c.train.steps == 0 && summary.first_step == 1 && !c.checkpoint.dir.empty() && c.checkpoint.save_final) save(0);
  finish_background_save();  // a run ends with its checkpoints complete
  if (rank0) {
    log_->log_event({{"event", "train_done"},
                     {"steps", static_cast<int64_t>(summary.losses.size())},
                     {"seconds", std::chrono::duration<double>(Clock::now() - start).count()}});
  }
  close(summary);
  return summary;
}

void Trainer::close(const TrainSummary& summary) {
  report_repeated_conditions();
  report_memory(summary);
  if (config_.output.dump_params) dump_params();
  if (config_.train.sample_tokens > 0) print_sample();
}

// The run's end: what was said once during it (a condition that recurred), with how often it happened.
void Trainer::report_repeated_conditions() {
  if (memory_saves_) {
    if (const std::string skipped = memory_saves_->skipped_summary(); !skipped.empty()) {
      std::fprintf(stderr, "%s\n", skipped.c_str());
    }
  }
  if (incomplete_copies_.count() > 0) {
    std::printf(
        "checkpoint: %lld copies in memory were not complete on every rank; each time the previous step "
        "stood\n",
        static_cast<long long>(incomplete_copies_.count()));
    std::fflush(stdout);
  }
}

// What this rank holds, and what the process really peaked at: printed, and rank<R>.json in output.dir.
void Trainer::report_memory(const TrainSummary& summary) {
  const TrainerConfig& c = config_;
  int64_t param_shard = 0;
  int64_t grad_shard = 0;
  for (auto* u : model_->units()) {
    param_shard += static_cast<int64_t>(u->shard().nbytes());
    grad_shard += static_cast<int64_t>(u->shard_grad().nbytes());
  }
  const CudaMemoryStats gpu = device_.is_cuda() ? cuda_memory_stats(device_.index()) : CudaMemoryStats{};
  nlohmann::json report = {
      {"rank", comm_->rank()},
      {"device", device_.str()},
      {"world_size", comm_->world_size()},
      {"strategy", to_string(c.fsdp.strategy)},
      {"numel", model_->numel()},
      {"padded_numel", model_->padded_numel()},
      {"param_shard_bytes", param_shard},
      {"gathered_param_peak_bytes", model_->gathered().peak},
      {"grad_shard_bytes", grad_shard},
      {"grad_accum_peak_bytes", grad_accum_peak_},
      {"activation_peak_bytes", activation_peak_},
      {"layout", model_->layout()},
      {"intra_node_transport", model_->intra_node_transport()},
      {"optimizer_bytes", optimizer_->state_bytes()},
      {"checkpoint_snapshot_bytes", async_saves_ ? async_saves_->snapshot_bytes() : 0},
      {"memory_copy_bytes", memory_saves_ ? 2 * memory_saves_->slot_bytes() : 0},
      {"init_from_bytes_read", init_bytes_read_},
      {"peak_rss_bytes", peak_rss_bytes()},
      {"start_rss_bytes", start_rss_},
      {"losses", summary.losses},
      {"last_val_loss", summary.last_val_loss},
  };
  if (device_.is_cuda()) {
    report["device_peak_allocated_bytes"] = gpu.peak_allocated;
    report["device_reserved_bytes"] = gpu.reserved;
  }
  const std::string gpu_peak =
      device_.is_cuda() ? " | peak GPU " + format_bytes(static_cast<double>(gpu.peak_allocated)) : std::string();
  std::printf("rank %d memory: params %s (shard %s + gathered peak %s) | grads %s | optimizer %s | peak RSS %s%s\n",
              comm_->rank(), format_bytes(static_cast<double>(param_shard + model_->gathered().peak)).c_str(),
              format_bytes(static_cast<double>(param_shard)).c_str(),
              format_bytes(static_cast<double>(model_->gathered().peak)).c_str(),
              format_bytes(static_cast<double>(grad_shard + grad_accum_peak_)).c_str(),
              format_bytes(static_cast<double>(optimizer_->state_bytes())).c_str(),
              format_bytes(static_cast<double>(peak_rss_bytes())).c_str(), gpu_peak.c_str());
  std::fflush(stdout);
  if (!c.output.dir.empty()) {
    std::ofstream(c.output.dir + "/rank" + std::to_string(comm_->rank()) + ".json") << report.dump(2) << '\n';
  }
}

// Every rank gathers (a collective); rank 0 writes output.dir/params.bin (fp32, flat).
void Trainer::dump_params() {
  at::Tensor params = model_->full_params_fp32().contiguous();
  if (comm_->rank() != 0) return;
  std::ofstream out(config_.output.dir + "/params.bin", std::ios::binary);
  out.write(static_cast<const char*>(params.data_ptr()), static_cast<std::streamsize>(params.nbytes()));
}

void Trainer::print_sample() {
  const TrainerConfig& c = config_;
  const bool text = c.data.format == "text";
  std::vector<int64_t> prompt = text ? encode_bytes(c.train.sample_prompt) : std::vector<int64_t>{0};
  if (prompt.empty()) prompt.push_back(static_cast<int64_t>('\n'));
  const auto produced = sample(*model_, *comm_, c, prompt);
  if (comm_->rank() != 0) return;
  if (text) {
    std::printf("sample: %s%s\n", c.train.sample_prompt.c_str(), decode_bytes(produced).c_str());
  } else {
    std::printf("sample token ids: %s\n", join(produced, " ").c_str());
  }
  std::fflush(stdout);
}

TrainSummary train(const TrainerConfig& config, const DistEnv& env) {
  Trainer trainer(config, env);
  return trainer.run();
}

}  // namespace meshrun::trainer
