// The stall rule both step accounts apply (StepAccountant from beats, CollectiveAccountant from collectives):
// an interval far longer than its work usually takes is a stall, a wait the script named no phase for. Pure.
#pragma once

namespace meshrun::launcher {

/// Beyond kStallFactor x the usual time plus kStallSlackS: a step twice as long as usual is not a stall.
inline constexpr double kStallFactor = 3;
inline constexpr double kStallSlackS = 1;

struct StallSplit {
  double work_s = 0;   // what the interval's work usually takes (all of it when it is no stall)
  double stall_s = 0;  // the rest
};

/// Splits an interval of `elapsed_s` whose work usually takes `usual_s` (<= 0: unknown, no stall).
inline StallSplit split_stall(double elapsed_s, double usual_s) {
  if (usual_s <= 0 || elapsed_s <= kStallFactor * usual_s + kStallSlackS) return {elapsed_s, 0};
  return {usual_s, elapsed_s - usual_s};
}

}  // namespace meshrun::launcher
