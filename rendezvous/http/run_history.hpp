// RunHistory: a short, bounded history of one run's progress (step, loss, tokens/s) for the live page's
// curves. Pure: LiveState feeds it the run's status once a second.
//
// Bounded by halving: when the ring is full, every other sample is dropped and the step stride between
// samples doubles, so the curve always spans the whole run in at most `capacity` points and memory never
// grows with the length of a run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "proto/rendezvous/rendezvous_messages.hpp"

namespace meshrun::rendezvous::http {

/// One point of a run's curves, aggregated over the ranks that report progress.
struct HistorySample {
  int64_t round = 0;        // a restart starts a new attempt: steps may go back
  int64_t step = 0;         // the furthest rank's step
  double loss = 0;          // mean over the ranks that report a loss (0: none does)
  double tokens_per_s = 0;  // sum over the ranks that report it: the run's throughput
  double age_s = 0;         // seconds since the sample was taken (filled in on the way out)
};

class RunHistory {
 public:
  static constexpr size_t kDefaultCapacity = 512;

  explicit RunHistory(size_t capacity = kDefaultCapacity);

  /// Adds a sample at `now_s` (any monotonic seconds) when the run moved `stride()` steps since the last
  /// one, or entered a new round. A run without progress adds nothing.
  void record(const proto::RunStatus& run, double now_s);
  /// The samples, oldest first, with their ages at `now_s`.
  std::vector<HistorySample> samples(double now_s) const;
  /// Steps between two samples: 1, doubled at each compaction.
  int64_t stride() const { return stride_; }
  size_t capacity() const { return capacity_; }

 private:
  void compact();

  size_t capacity_;
  int64_t stride_ = 1;
  std::vector<std::pair<HistorySample, double>> samples_;  // with the time each was taken
};

/// {"run_id", "stride", "capacity", "samples": [{round, step, loss, tokens_per_s, age_s}]}.
nlohmann::json history_json(const std::string& run_id, const RunHistory& history, double now_s);

}  // namespace meshrun::rendezvous::http
