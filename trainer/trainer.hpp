// Trainer: one worker's whole run, shaped like torchtitan's trainer. The constructor sets up (threads,
// device, process group, data, sharded model, optimizer, metrics); load() resumes from a checkpoint;
// step() is one optimizer step with gradient accumulation; evaluate(), save() and close() (memory
// report, parameter dump, a short sample) do what they say; run() is the loop that calls them.
// train() is the one-call form main() uses.
#pragma once

#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/repeated_notice.hpp"
#include "trainer/collective_reporter.hpp"
#include "trainer/config/trainer_config.hpp"
#include "trainer/distributed/dist_env.hpp"
#include "trainer/metrics.hpp"
#include "trainer/preemption.hpp"
#include "trainer/progress_beats.hpp"

namespace meshrun::trainer {

class AdamW;
class AsyncCheckpointer;
class MemoryCheckpointer;
class Communicator;
class ShardedModel;
struct MemoryCopyStats;
class TokenDataset;

struct TrainSummary {
  std::vector<double> losses;  // global mean training loss per step
  double last_val_loss = -1;
  int64_t first_step = 1;     // > 1 when resumed from a checkpoint
  int stopped_by_signal = 0;  // SIGUSR1 / SIGTERM: checkpointed and stopped early
};

/// kBackground: checkpoint.async hands the save to the background writer (periodic saves); kBlocking:
/// returns once the checkpoint is complete (the final one, a preemption's, and every one without async).
enum class SaveMode { kBlocking, kBackground };

/// What one optimizer step produced, agreed by every rank.
struct StepResult {
  double loss = 0;              // mean over ranks
  bool stop_requested = false;  // some rank received a preemption signal
};

class Trainer {
 public:
  Trainer(const TrainerConfig& config, const DistEnv& env);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Restores the newest step every rank holds in memory (checkpoint.memory_interval, after a restart) when
  /// no storage checkpoint is as new; else checkpoint.resume (a step folder, or the newest complete one for
  /// "auto", which a restart with copies in memory implies); with nothing to resume, model.init_from's
  /// weights (if set). Returns the first step still to run: 1 for a fresh start.
  int64_t load();
  /// Runs optimizer step `step` (1-based) and logs it.
  StepResult step(int64_t step);
  /// The validation loss, mean over ranks (train.eval_batches batches).
  double evaluate(int64_t step);
  /// Writes a checkpoint of the state after `step` (a blocking save first completes a background one),
  /// between a "checkpoint" beat and a train beat of the same step (the phase's end, for the agent).
  void save(int64_t step, SaveMode mode = SaveMode::kBlocking);
  /// The save itself: written (kBlocking), or snapshotted and handed to the background writer.
  void save_state(int64_t step, SaveMode mode);
  /// Blocks until the background save in flight, if any, is complete (collective).
  void finish_background_save();
  /// End of run: memory report (and rank<R>.json), output.dump_params, train.sample_tokens.
  void close(const TrainSummary& summary);
  /// load(), then step/evaluate/save up to train.steps or a preemption signal, then close().
  TrainSummary run();

 private:
  void init_from_hf_weights();
  /// The restore from copies in memory; the first step to run, or nullopt when the caller loads `resume_from`.
  std::optional<int64_t> restore_from_memory(const std::string& resume_from);
  /// Starts the copy in memory of the state after `step` when one is due.
  void copy_to_memory(int64_t step);
  void log_memory_copy(const MemoryCopyStats& copy);
  void report_repeated_conditions();
  void report_memory(const TrainSummary& summary);
  void dump_params();
  void print_sample();

  const TrainerConfig& config_;
  PreemptionWatch preemption_;  // first: its signal mask must precede every thread
  at::Device device_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<CollectiveReporter> collectives_;  // the ledger to the agent under meshrun (hang verdicts)
  int64_t start_rss_ = 0;  // LibTorch, process group and the opened data: just before the model is built
  std::unique_ptr<TokenDataset> data_;
  std::unique_ptr<ShardedModel> model_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<MetricsLog> log_;
  std::atomic<int64_t> training_step_{0};             // the step running now: the background writers' overlap witness
  std::unique_ptr<AsyncCheckpointer> async_saves_;    // checkpoint.async; after model_ and optimizer_, which it reads
  std::unique_ptr<MemoryCheckpointer> memory_saves_;  // checkpoint.memory_interval under meshrun
  bool restarted_ = false;                            // TORCHELASTIC_RESTART_COUNT > 0
  std::string load_source_ = "fresh";                 // what load() restored from: fresh, storage, memory[ (buddy)]
  RepeatedNotice incomplete_copies_;                  // rank 0: copies not sealed by every rank
  ProgressBeats beats_{progress_socket_from_env()};   // to the agent under meshrun, else off
  int64_t tokens_per_step_ = 0;
  double flops_per_token_ = 0;
  int64_t grad_accum_peak_ = 0;
  int64_t activation_peak_ = 0;
  int64_t init_bytes_read_ = 0;  // model.init_from: bytes of weights this rank read
};

TrainSummary train(const TrainerConfig& config, const DistEnv& env);

}  // namespace meshrun::trainer
