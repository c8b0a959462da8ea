// Prints what every thread of a process tree waits on (launcher/activity/wait_probe.hpp) as JSON, for
// wait_samples/record.py, which records real processes for tests/launcher/test_wait_rule.cpp. Not a test.
//   dump_waits PID
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include <nlohmann/json.hpp>

#include "launcher/activity/wait_probe.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: dump_waits PID\n");
    return 2;
  }
  const auto tree = meshrun::launcher::read_tree_waits("/proc", static_cast<pid_t>(std::atoi(argv[1])));
  std::cout << nlohmann::json(tree).dump(1) << "\n";
  return tree.processes.empty() ? 1 : 0;
}
