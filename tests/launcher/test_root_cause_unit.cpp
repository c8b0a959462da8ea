// Root cause across nodes, the launcher's side: the Python traceback read from a stderr tail, the report
// built from a failure, and the block printed from the daemon's time-ordered list.
#include <catch2/catch.hpp>

#include "launcher/failure/python_traceback.hpp"
#include "launcher/failure/root_cause.hpp"

using namespace meshrun;
using namespace meshrun::launcher;

TEST_CASE("the exception and its innermost frames are read from a stderr tail, rank prefixes and all",
          "[rootcause][traceback]") {
  const std::vector<std::string> tail = {
      "some log line",
      "[rank3]: Traceback (most recent call last):",
      "[rank3]:   File \"/job/train.py\", line 87, in <module>",
      "[rank3]:     main()",
      "[rank3]:   File \"/job/train.py\", line 41, in step",
      "[rank3]:     raise RuntimeError(f\"bad batch {i}\")",
      "[rank3]:     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
      "[rank3]: RuntimeError: bad batch 7",
      "[rank3]: and a second line of the message",
  };
  const auto err = parse_python_traceback(tail, 2);
  REQUIRE(err);
  CHECK(err->error == "RuntimeError: bad batch 7");
  CHECK(err->frames == std::vector<std::string>{"File \"/job/train.py\", line 41, in step",
                                                "  raise RuntimeError(f\"bad batch {i}\")"});
}

TEST_CASE("a chained exception gives the last one, a tail cut above the header still parses",
          "[rootcause][traceback]") {
  const std::vector<std::string> chained = {"Traceback (most recent call last):",
                                            "  File \"a.py\", line 1, in f",
                                            "    x()",
                                            "KeyError: 'k'",
                                            "",
                                            "During handling of the above exception, another exception occurred:",
                                            "",
                                            "Traceback (most recent call last):",
                                            "  File \"a.py\", line 3, in g",
                                            "    y()",
                                            "ValueError: from the handler"};
  CHECK(parse_python_traceback(chained)->error == "ValueError: from the handler");
  const std::vector<std::string> headless = {"    main()", "  File \"a.py\", line 9, in main", "    boom()",
                                             "ZeroDivisionError: division by zero"};
  const auto cut = parse_python_traceback(headless);
  REQUIRE(cut);
  CHECK(cut->error == "ZeroDivisionError: division by zero");
  CHECK(cut->frames.front() == "File \"a.py\", line 9, in main");
}

TEST_CASE("no traceback, no error: a crash without Python, or plain output", "[rootcause][traceback]") {
  CHECK_FALSE(parse_python_traceback({}));
  CHECK_FALSE(parse_python_traceback({"Segmentation fault (core dumped)"}));
  CHECK_FALSE(parse_python_traceback({"Traceback (most recent call last):", "  File \"a.py\", line 1, in f"}));
}

TEST_CASE("a failure report carries the rank, the exit, the error and the frames, a hang its stack", "[rootcause]") {
  FailureInfo info;
  info.rank = 5;
  info.local_rank = 1;
  info.host = "node-b";
  info.status.code = 1;
  info.time = std::chrono::system_clock::now() - std::chrono::seconds(2);
  info.stderr_tail = {"Traceback (most recent call last):", "  File \"t.py\", line 2, in f", "    g()",
                      "OSError: disk full"};
  const auto report = failure_report(info, 3);
  CHECK(report.round == 3);
  CHECK(report.rank == 5);
  CHECK(report.host == "node-b");
  CHECK(report.exit == "exit code 1");
  CHECK(report.error == "OSError: disk full");
  CHECK(report.cause == proto::RestartCause::kWorkerFailed);
  CHECK(report.age_s >= 2.0);
  CHECK(report.age_s < 60.0);

  info.hang_reason = "no progress beat for 9.0 s (budget 8.0 s) after step 4 (train)";
  info.stderr_tail.clear();
  info.stack = "Thread 7 (idle): \"MainThread\"\n    block (job.py:30)\n    main (job.py:60)\n";
  const auto hung = failure_report(info, 3);
  CHECK(hung.cause == proto::RestartCause::kHung);
  CHECK(hung.exit == "hung: " + info.hang_reason);
  CHECK(hung.traceback == std::vector<std::string>{"    block (job.py:30)", "    main (job.py:60)"});
}

TEST_CASE("the root cause block names the first failure and lists the others with their delay", "[rootcause]") {
  proto::FailureReport first;
  first.rank = 3;
  first.host = "node-b";
  first.exit = "exit code 1";
  first.error = "RuntimeError: boom";
  first.traceback = {"File \"t.py\", line 2, in f"};
  first.unix_ms = 1'000'000;
  proto::FailureReport later = first;
  later.rank = 0;
  later.host = "node-a";
  later.error = "RuntimeError: Connection closed by peer";
  later.traceback.clear();
  later.unix_ms = 1'000'250;
  const std::string text = format_root_cause({first, later});
  CHECK_THAT(text, Catch::StartsWith("meshrun: root cause (the first of 2 failure(s) in the job, round 0):\n"
                                     "  rank 3 on node-b (local rank 0): exit code 1 at "));
  CHECK_THAT(text, Catch::Contains("  error: RuntimeError: boom\n    File \"t.py\", line 2, in f\n"));
  CHECK_THAT(text,
             Catch::Contains("  then, as consequences:\n    rank 0 on node-a (local rank 0): exit code 1 (+0.25 s): "
                             "RuntimeError: Connection closed by peer\n"));
  CHECK(format_root_cause({}).empty());
}
