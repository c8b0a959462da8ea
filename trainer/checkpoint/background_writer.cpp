#include "trainer/checkpoint/background_writer.hpp"

#include <chrono>
#include <exception>
#include <utility>

namespace meshrun::trainer {
namespace {

// What throw_if_stopping() throws to end a job when the writer is destroyed mid-save.
struct Cancelled : std::exception {
  const char* what() const noexcept override { return "checkpoint save cancelled"; }
};

}  // namespace

BackgroundWriter::BackgroundWriter() : thread_([this] { loop(); }) {}

BackgroundWriter::~BackgroundWriter() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void BackgroundWriter::submit(Job job, bool holds_gate) {
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return idle_; });  // one job at a time: none is ever dropped
    job_ = std::move(job);
    idle_ = false;
    gate_open_ = !holds_gate;
  }
  changed_.notify_all();
}

double BackgroundWriter::wait_for_gate() {
  const auto begin = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return gate_open_; });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

void BackgroundWriter::wait_idle() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return idle_; });
}

BackgroundWriter::State BackgroundWriter::state() const {
  std::lock_guard lock(mutex_);
  return {idle_, first_error_};
}

void BackgroundWriter::release_gate() {
  {
    std::lock_guard lock(mutex_);
    gate_open_ = true;
  }
  changed_.notify_all();
}

void BackgroundWriter::throw_if_stopping() const {
  std::lock_guard lock(mutex_);
  if (stop_) throw Cancelled();
}

void BackgroundWriter::loop() {
  for (;;) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return stop_ || job_.has_value(); });
    if (stop_) return;
    Job job = std::move(*job_);
    job_.reset();
    lock.unlock();
    std::string error;
    try {
      job();
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    idle_ = true;
    gate_open_ = true;  // also when the job failed: the optimizer step must not wait forever
    if (!error.empty() && first_error_.empty()) first_error_ = error;
    lock.unlock();
    changed_.notify_all();
  }
}

}  // namespace meshrun::trainer
