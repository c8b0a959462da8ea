// ClockOffset: how far another process's wall clock is from ours, from request/answer round trips (the
// NTP rule): a request leaves at `sent` (our clock), the other side reads its clock (`remote`) and
// answers, the answer arrives at `received`; then remote - (sent + received) / 2 is the offset, off by at
// most half the round trip. The sample with the shortest round trip among the last kSamples wins: a
// queued request or a busy peer only widens the round trip, it never biases the pick.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>

namespace meshrun {

/// An offset (the other clock minus ours) and how far it may be off, in seconds.
struct OffsetEstimate {
  double offset_s = 0;
  double uncertainty_s = 0;
};

class ClockOffset {
 public:
  static constexpr size_t kSamples = 16;

  /// Times in nanoseconds since the epoch; a sample whose answer came before its request is dropped.
  void add(int64_t sent_ns, int64_t remote_ns, int64_t received_ns) {
    if (received_ns < sent_ns) return;
    samples_.push_back(Sample{sent_ns, remote_ns, received_ns});
    if (samples_.size() > kSamples) samples_.pop_front();
  }

  std::optional<OffsetEstimate> estimate() const {
    if (samples_.empty()) return std::nullopt;
    const auto best = std::min_element(samples_.begin(), samples_.end(), [](const Sample& a, const Sample& b) {
      return a.received_ns - a.sent_ns < b.received_ns - b.sent_ns;
    });
    // In integers, halves taken separately: the sum of two epoch times in nanoseconds would overflow int64,
    // and a double holds them only to 256 ns.
    const int64_t offset_ns = best->remote_ns - best->sent_ns / 2 - best->received_ns / 2;
    return OffsetEstimate{static_cast<double>(offset_ns) * 1e-9,
                          static_cast<double>(best->received_ns - best->sent_ns) * 0.5e-9};
  }

 private:
  struct Sample {
    int64_t sent_ns;
    int64_t remote_ns;
    int64_t received_ns;
  };
  std::deque<Sample> samples_;
};

/// The wall clock in nanoseconds since the epoch (for clock offsets; never for deadlines).
inline int64_t unix_time_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace meshrun
