// WorkerProcess: real children: exit codes, signals, exec failures, group kill.
#include <catch2/catch.hpp>
#include <csignal>

#include "launcher/workers/worker_process.hpp"
#include "support/subprocess.hpp"

using namespace meshrun::launcher;

namespace {

SpawnSpec spec_for(std::vector<std::string> argv) {
  SpawnSpec s;
  s.executable = argv.front();
  s.argv = std::move(argv);
  s.env = {"PATH=/usr/bin:/bin"};
  sigemptyset(&s.child_sigmask);
  return s;
}

ExitStatus run_to_end(WorkerProcess& p) {
  while (!p.poll()) ::usleep(1000);
  p.reap();
  return *p.status();
}

}  // namespace

TEST_CASE("exit codes and signals are reported", "[worker_process]") {
  auto p = WorkerProcess::spawn(spec_for({"/bin/sh", "-c", "exit 7"}));
  p.confirm_exec();
  const auto s = run_to_end(p);
  CHECK_FALSE(s.signaled);
  CHECK(s.code == 7);
  CHECK(s.describe() == "exit code 7");

  auto q = WorkerProcess::spawn(spec_for({"/bin/sh", "-c", "kill -SEGV $$"}));
  q.confirm_exec();
  const auto t = run_to_end(q);
  CHECK(t.signaled);
  CHECK(t.signal == SIGSEGV);
  CHECK(t.exit_code() == 128 + SIGSEGV);
  CHECK_THAT(t.describe(), Catch::Contains("SIGSEGV"));
}

TEST_CASE("a failed exec is a SpawnError naming the cause", "[worker_process]") {
  auto p = WorkerProcess::spawn(spec_for({"/no/such/program"}));
  CHECK_THROWS_AS(p.confirm_exec(), SpawnError);
}

TEST_CASE("the worker leads its own process group and signal_group reaches its children", "[worker_process]") {
  meshrun::testing::TempDir dir;
  const std::string pidfile = dir.path() + "/child";
  // The worker forks a grandchild and both sleep; the group signal must end both.
  auto p = WorkerProcess::spawn(spec_for(
      {"/bin/sh", "-c", "sleep 300 & echo $! > " + pidfile + ".tmp; mv " + pidfile + ".tmp " + pidfile + "; wait"}));
  p.confirm_exec();
  REQUIRE(meshrun::testing::wait_for_file(pidfile));
  const pid_t grandchild = std::stoi(meshrun::testing::read_file(pidfile));
  CHECK(::getpgid(p.pid()) == p.pid());
  CHECK(::getpgid(grandchild) == p.pid());
  p.signal_group(SIGTERM);
  const auto s = run_to_end(p);
  CHECK(s.signaled);
  CHECK(s.signal == SIGTERM);
  for (int i = 0; i < 3000 && meshrun::testing::process_alive(grandchild); ++i) ::usleep(1000);
  CHECK_FALSE(meshrun::testing::process_alive(grandchild));
}
