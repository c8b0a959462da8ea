// The agent <-> standby messages (proto/worker/standby_messages.hpp): round trips, and the refusals a malformed one
// gets. The Python side reads the same JSON (launcher/workers/python/_meshrun_standby.py;
// tests/launcher/standby_test.sh).
#include <algorithm>
#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "proto/worker/standby_messages.hpp"

using namespace meshrun::proto;

TEST_CASE("standby messages: an order survives the round trip, environment included", "[standby]") {
  const StandbyOrder order{.orig_argv = {"python", "-u", "train.py", "--lr", "0.1"},
                           .module = false,
                           .target = "train.py",
                           .args = {"--lr", "0.1"},
                           .env = {"RANK=3", "EMPTY=", "WITH_EQUALS=a=b", "UNICODE=caf\xc3\xa9"},
                           .cwd = "/work/job"};
  const StandbyOrder back = parse_standby_order(format_standby_order(order));
  CHECK(back.orig_argv == order.orig_argv);
  CHECK_FALSE(back.module);
  CHECK(back.target == "train.py");
  CHECK(back.args == order.args);
  CHECK(back.cwd == "/work/job");
  std::vector<std::string> env = back.env;
  std::sort(env.begin(), env.end());
  CHECK(env == std::vector<std::string>{"EMPTY=", "RANK=3", "UNICODE=caf\xc3\xa9", "WITH_EQUALS=a=b"});
}

TEST_CASE("standby messages: a -m order keeps its module", "[standby]") {
  const StandbyOrder order{.orig_argv = {"python", "-u", "-m", "pkg.train"},
                           .module = true,
                           .target = "pkg.train",
                           .args = {},
                           .env = {},
                           .cwd = "/"};
  const StandbyOrder back = parse_standby_order(format_standby_order(order));
  CHECK(back.module);
  CHECK(back.target == "pkg.train");
  CHECK(back.env.empty());
}

TEST_CASE("standby messages: an environment that is not UTF-8 is refused, not mangled", "[standby]") {
  const StandbyOrder order{
      .orig_argv = {"python"}, .module = false, .target = "a.py", .args = {}, .env = {"BAD=\xff\xfe"}, .cwd = "/"};
  CHECK_THROWS_AS(format_standby_order(order), meshrun::ProtocolError);
}

TEST_CASE("standby messages: ready and failed round trips", "[standby]") {
  const StandbyReady ready{.ok = true, .error = "", .import_s = 1.75, .pss_kb = 412000};
  const StandbyReady back = parse_standby_ready(format_standby_ready(ready));
  CHECK(back.ok);
  CHECK(back.import_s == 1.75);
  CHECK(back.pss_kb == 412000);
  const StandbyReady failed{
      .ok = false, .error = "cannot import torch: ModuleNotFoundError", .import_s = 0, .pss_kb = 0};
  const StandbyReady failed_back = parse_standby_ready(format_standby_ready(failed));
  CHECK_FALSE(failed_back.ok);
  CHECK(failed_back.error == failed.error);
}

TEST_CASE("standby messages: malformed messages name what is wrong", "[standby]") {
  CHECK_THROWS_AS(parse_standby_ready("not json"), meshrun::ProtocolError);
  CHECK_THROWS_AS(parse_standby_ready(R"({"ok": true})"), meshrun::ProtocolError);       // no import_s
  CHECK_THROWS_AS(parse_standby_ready(R"({"ok": "yes"})"), meshrun::ProtocolError);      // wrong type
  CHECK_THROWS_AS(parse_standby_order(R"({"orig_argv": []})"), meshrun::ProtocolError);  // no module...
  CHECK_THROWS_AS(parse_standby_order(R"({"orig_argv": [], "module": false, "target": "a.py", "args": [],
                                          "env": {"A": 1}, "cwd": "/"})"),
                  meshrun::ProtocolError);  // a value that is not a string
}
