// Stack dumps of a hung worker, with whatever tool this machine has: py-spy (PyPI; found next to the
// worker's interpreter or on PATH) for Python workers, then eu-stack (Debian's elfutils), then gdb.
// Each runs for a bounded time; the first that prints a stack wins.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

namespace meshrun::launcher {

struct StackDump {
  std::string tool;  // "py-spy", "eu-stack", "gdb"; empty when none worked
  std::string text;  // the stack, or why there is none (which tools were tried, how to get one)
};

/// Dumps `pid`'s stacks. `executable` is the worker's program (its folder is searched for py-spy first).
StackDump dump_stack(pid_t pid, const std::string& executable, std::chrono::seconds limit = std::chrono::seconds(20));

}  // namespace meshrun::launcher
