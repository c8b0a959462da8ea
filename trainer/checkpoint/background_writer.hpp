// The writer thread of a background save, one per saver: a checkpoint to storage (async_writer.hpp) and a
// copy in the agent's memory (memory_checkpointer.hpp). Each takes a snapshot of the live shards and both AdamW moments
// off the training thread while the next step's forward and backward run (they only read them); the
// optimizer step, the first thing that changes them, waits at the gate (wait_for_gate) until the job says
// it has read what it needs (release_gate), or has ended. One job at a time: the owners run a save's phases
// in lockstep through the step's all-reduce and never queue a second job behind a running one.
//
// Why one class: the thread, the job slot, the gate and the error that outlives the job are the part that
// must be right under every interleaving (a job that throws before it releases the gate, a destructor that
// runs mid-job), so they are written once; the owners keep only what their job does.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace meshrun::trainer {

class BackgroundWriter {
 public:
  /// A job runs on the writer thread. It may call release_gate() once it no longer reads the live state,
  /// and should call throw_if_stopping() between long pieces of work; an exception it throws becomes
  /// state().first_error. Whatever it writes for its owner is visible to the owner once state().idle is
  /// true, or once wait_for_gate() returned for a job that never released the gate early.
  using Job = std::function<void()>;

  /// Starts the writer thread. Construct after the PreemptionWatch, so the thread keeps the preemption
  /// signals blocked.
  BackgroundWriter();
  /// Stops the thread: a job in flight is cut short at its next throw_if_stopping().
  ~BackgroundWriter();
  BackgroundWriter(const BackgroundWriter&) = delete;
  BackgroundWriter& operator=(const BackgroundWriter&) = delete;

  /// Training thread: runs `job` next, once the job before it ended (the owners wait for that first, so
  /// this never blocks in practice). `holds_gate`: wait_for_gate() waits for it.
  void submit(Job job, bool holds_gate);
  /// Training thread: waits until the job in flight released the gate or ended; returns the seconds waited.
  double wait_for_gate();
  /// Blocks until no job is in flight.
  void wait_idle();

  /// What the writer is doing, read at one instant.
  struct State {
    bool idle = true;
    std::string first_error;  // the first exception that ended a job ("" when none did)
  };
  State state() const;

  /// Writer thread (the job): the live state may change from here on.
  void release_gate();
  /// Writer thread (the job): throws when the writer is being destroyed.
  void throw_if_stopping() const;

 private:
  void loop();

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<Job> job_;
  bool idle_ = true;
  bool gate_open_ = true;
  bool stop_ = false;
  std::string first_error_;
  std::thread thread_;  // last: starts after every member above exists
};

}  // namespace meshrun::trainer
