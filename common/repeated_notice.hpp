// RepeatedNotice: a condition that may come back every step (a copy skipped, a retry) is said once, then at most
// once per interval with how often it came back, and counted for the run's summary: a log that says the same
// line every step hides everything else in it. Header-only: the trainer links no meshrun_common.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace meshrun {

class RepeatedNotice {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kDefaultEvery{300};

  explicit RepeatedNotice(std::chrono::seconds every = kDefaultEvery) : every_(every) {}

  /// Counts one occurrence of the condition `text` describes. Returns the line to print now: the first time,
  /// `text` and when it will be said again; later, once `every` has passed since the last line, `text` with the
  /// count so far. Nothing in between.
  std::optional<std::string> occurred(const std::string& text, Clock::time_point now = Clock::now());

  int64_t count() const { return count_; }
  /// How many occurrences no line has said yet (the summary's concern when the run ends between two lines).
  int64_t unsaid() const { return count_ - said_count_; }

 private:
  std::chrono::seconds every_;
  int64_t count_ = 0;
  int64_t said_count_ = 0;
  Clock::time_point said_at_{};
};

namespace repeated_notice_detail {

inline std::string interval_text(std::chrono::seconds every) {
  const auto s = every.count();
  if (s % 60 == 0) return std::to_string(s / 60) + (s == 60 ? " minute" : " minutes");
  return std::to_string(s) + " s";
}

}  // namespace repeated_notice_detail

inline std::optional<std::string> RepeatedNotice::occurred(const std::string& text, Clock::time_point now) {
  ++count_;
  if (count_ == 1) {
    said_count_ = count_;
    said_at_ = now;
    return text + " [said once; if it recurs, again at most every " + repeated_notice_detail::interval_text(every_) +
           " with a count]";
  }
  if (now - said_at_ < every_) return std::nullopt;
  const int64_t since = count_ - said_count_;
  said_count_ = count_;
  said_at_ = now;
  return text + " [" + std::to_string(count_) + " times in all, " + std::to_string(since) + " since the last line]";
}

}  // namespace meshrun
