// ProgressBeats: meshrun-trainer's progress beats to its agent (docs/progress.md). Under meshrun every
// worker's MESHRUN_PROGRESS names a Unix datagram socket; each beat is one nonblocking send that is
// dropped when the agent is busy or gone, so training never waits on it. Without the variable (torchrun,
// a plain run) it sends nothing.
#pragma once

#include <optional>
#include <string>

#include "common/unique_fd.hpp"
#include "proto/worker/progress_beat.hpp"

namespace meshrun::trainer {

class ProgressBeats {
 public:
  /// `socket_path` empty: beats are off.
  explicit ProgressBeats(std::string socket_path);

  /// After an optimizer step: its loss, throughput and the seconds it spent computing (not waiting).
  void step_done(int64_t step, double loss, double tokens_per_s, double compute_s);
  /// Entering a phase that takes longer than a step ("eval", "checkpoint"): the agent's longer budget.
  void phase(int64_t step, const std::string& name);

 private:
  void send(const proto::Beat& beat);

  std::string path_;
  UniqueFd fd_;
};

/// MESHRUN_PROGRESS, or "" when unset.
std::string progress_socket_from_env();

}  // namespace meshrun::trainer
