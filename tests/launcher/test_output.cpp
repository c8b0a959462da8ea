// OutputPump line prefixing and the failure summary text.
#include <fcntl.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include "launcher/failure/failure_summary.hpp"
#include "launcher/workers/output_pump.hpp"
#include "support/subprocess.hpp"

using namespace meshrun;
using namespace meshrun::launcher;

TEST_CASE("worker output is prefixed per line, split reads included, file copy unprefixed", "[output]") {
  meshrun::testing::TempDir dir;
  int in[2];
  REQUIRE(::pipe(in) == 0);
  const std::string console_path = dir.path() + "/console";
  const std::string file_path = dir.path() + "/file";
  UniqueFd console(::open(console_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644));
  OutputPump pump(UniqueFd{in[0]}, "[rank3]:", console.get(),
                  UniqueFd(::open(file_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644)), 2);
  const std::string part1 = "hello\nwor";
  const std::string part2 = "ld\nlast line without newline";
  REQUIRE(::write(in[1], part1.data(), part1.size()) == static_cast<ssize_t>(part1.size()));
  pump.on_readable();
  REQUIRE(::write(in[1], part2.data(), part2.size()) == static_cast<ssize_t>(part2.size()));
  ::close(in[1]);
  while (pump.on_readable()) {}
  CHECK(meshrun::testing::read_file(console_path) ==
        "[rank3]:hello\n[rank3]:world\n[rank3]:last line without newline\n");
  CHECK(meshrun::testing::read_file(file_path) == part1 + part2);
  REQUIRE(pump.tail().size() == 2);
  CHECK(pump.tail().back() == "last line without newline");
}

TEST_CASE("lines matching a duplicate filter go to the shared file with their prefix", "[output]") {
  meshrun::testing::TempDir dir;
  const std::string filtered = dir.path() + "/filtered_stdout.log";
  const auto duplicate = std::make_shared<const LineDuplicator>(
      UniqueFd(::open(filtered.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644)), std::vector<std::string>{"loss", "a,b"});
  for (int rank = 0; rank < 2; ++rank) {
    int in[2];
    REQUIRE(::pipe(in) == 0);
    OutputPump pump(UniqueFd{in[0]}, "[rank" + std::to_string(rank) + "]:", -1, UniqueFd{}, 0, duplicate);
    const std::string text = "step 1\nloss 0.5\nx a,b y\nno match";
    REQUIRE(::write(in[1], text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    ::close(in[1]);
    while (pump.on_readable()) {}
  }
  CHECK(meshrun::testing::read_file(filtered) ==
        "[rank0]:loss 0.5\n[rank0]:x a,b y\n[rank1]:loss 0.5\n[rank1]:x a,b y\n");
}

TEST_CASE("prefix templates expand torchrun's macros", "[output]") {
  CHECK(expand_prefix("[${role_name}${local_rank}]:", 5, 1, "default", "h") == "[default1]:");
  CHECK(expand_prefix("${hostname}:${rank}: ", 12, 0, "r", "node7") == "node7:12: ");
}

TEST_CASE("the failure summary names rank, host, pid, exit and the cause", "[failure_summary]") {
  FailureInfo f;
  f.rank = 5;
  f.local_rank = 1;
  f.host = "node-a";
  f.pid = 4242;
  f.status = ExitStatus{.signaled = false, .code = 3, .signal = 0};
  f.time = std::chrono::system_clock::now();
  f.stderr_tail = {"Traceback", "ValueError: bad"};
  const std::string s = format_failure_summary(f);
  CHECK_THAT(s, Catch::Contains("rank:       5 (local rank 1"));
  CHECK_THAT(s, Catch::Contains("node-a"));
  CHECK_THAT(s, Catch::Contains("4242"));
  CHECK_THAT(s, Catch::Contains("exit code 3"));
  CHECK_THAT(s, Catch::Contains("ValueError: bad"));

  SECTION("an abort at interpreter exit is named as PyTorch's teardown race, with what to do") {
    f.status = ExitStatus{.signaled = true, .code = 0, .signal = 6};
    f.stderr_tail = {"[rank5]: done", "terminate called without an active exception"};
    CHECK_THAT(format_failure_summary(f),
               Catch::Contains("pytorch/pytorch#190489") && Catch::Contains("destroy_process_group()"));
    f.stderr_tail = {"Fatal Python error: Aborted"};  // another abort: no such hint
    CHECK_THAT(format_failure_summary(f), !Catch::Contains("190489"));
  }

  SECTION("signals by name, error files rendered") {
    f.status = ExitStatus{.signaled = true, .code = 0, .signal = 9};
    f.error_file_contents =
        R"({"message": {"message": "RuntimeError: oops", "extraInfo": {"py_callstack": "File x.py, line 3", "timestamp": "1"}}})";
    const std::string t = format_failure_summary(f);
    CHECK_THAT(t, Catch::Contains("SIGKILL"));
    CHECK_THAT(t, Catch::Contains("RuntimeError: oops"));
    CHECK_THAT(t, Catch::Contains("File x.py, line 3"));
    CHECK(f.status.exit_code() == 137);
  }
}
