// Beat: one progress message a worker sends its agent (docs/progress.md): a short text datagram of
// space-separated key=value fields, e.g. "step=120 phase=train loss=2.31 tokens_per_s=51200 compute_s=0.094".
//   step          required, an integer >= 0: the step the worker just finished (or is at)
//   phase         optional, a word (letters, digits, '_', '-'; up to 32): "train" when absent; any other
//                 phase ("eval", "checkpoint", ...) gets the longer hang budget
//   loss, tokens_per_s, compute_s   optional finite numbers (compute_s: seconds of this step spent
//                 computing, without waiting for other ranks; it is what names stragglers)
// Unknown keys are ignored, so scripts may send more than this agent understands.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace meshrun::proto {

inline constexpr const char* kTrainPhase = "train";
/// A datagram longer than this is not a beat (the socket reads at most this many bytes).
inline constexpr size_t kMaxBeatBytes = 512;

struct Beat {
  int64_t step = 0;
  std::string phase = kTrainPhase;
  std::optional<double> loss;
  std::optional<double> tokens_per_s;
  std::optional<double> compute_s;
};

/// Parses one datagram; throws ProtocolError naming the field and what is wrong with it.
Beat parse_beat(std::string_view text);

/// The datagram for `beat` (header-only: meshrun-trainer uses it without linking meshrun_proto).
inline std::string format_beat(const Beat& beat) {
  std::string text = "step=" + std::to_string(beat.step);
  if (beat.phase != kTrainPhase) text += " phase=" + beat.phase;
  const auto add = [&text](const char* key, const std::optional<double>& value) {
    if (!value) return;
    char buf[64];
    std::snprintf(buf, sizeof(buf), " %s=%.6g", key, *value);
    text += buf;
  };
  add("loss", beat.loss);
  add("tokens_per_s", beat.tokens_per_s);
  add("compute_s", beat.compute_s);
  return text;
}

}  // namespace meshrun::proto
