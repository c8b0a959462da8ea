// Every rank's stack at a hang, identical ones printed once with their ranks:
//   3 ranks (0-2): all_reduce (distributed_c10d.py:4174) <- step (train.py:88) <- main (train.py:120)
//   rank 3: load_batch (data.py:12) <- main (train.py:118)
// Stacks compare by their frames alone (thread ids, pids and the tool's headers differ per process).
#pragma once

#include <string>
#include <vector>

namespace meshrun::launcher {

struct RankStack {
  int rank = 0;
  std::string tool;  // "py-spy", "eu-stack", "gdb"; empty: none
  std::string text;  // the tool's output, or why there is none
};

/// The frames of a stack dump, innermost first, one "function (file:line)" per frame, with the tool's
/// process and thread headers and addresses dropped.
std::vector<std::string> stack_frames(const RankStack& stack);

/// The grouped block (ends with a newline), largest group first; "" when `stacks` is empty.
std::string format_stack_groups(const std::vector<RankStack>& stacks);

}  // namespace meshrun::launcher
