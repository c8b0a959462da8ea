// Clock: the source of "now" for state machines with deadlines (rendezvous rounds, heartbeats).
// Production code uses SteadyClock; tests inject FakeClock and advance it instead of sleeping.
#pragma once

#include <chrono>
#include <cstdint>

namespace meshrun {

using Duration = std::chrono::steady_clock::duration;
using TimePoint = std::chrono::steady_clock::time_point;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint now() const = 0;
};

class SteadyClock final : public Clock {
 public:
  TimePoint now() const override { return std::chrono::steady_clock::now(); }
};

/// A clock that only moves when told to.
class FakeClock final : public Clock {
 public:
  TimePoint now() const override { return now_; }
  void advance(Duration d) { now_ += d; }

 private:
  TimePoint now_{std::chrono::hours(1)};
};

/// Seconds as a double, for messages and JSON.
inline double to_seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

inline Duration from_seconds(double s) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}

/// The wall clock in milliseconds since the epoch (for reports and skew checks; never for deadlines).
inline int64_t unix_time_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace meshrun
