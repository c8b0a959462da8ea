// The thread both background saves run on, and the slice walk every file chunk and copy is cut by: the
// gate opens when the job says so or when it ends (also by an exception), the first error outlives its job,
// and a writer destroyed mid-job stops the job at its next check.
#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "trainer/checkpoint/background_writer.hpp"
#include "trainer/model/model.hpp"

using meshrun::trainer::BackgroundWriter;

TEST_CASE("the gate holds until the job releases it, then the job writes on", "[background_writer]") {
  BackgroundWriter writer;
  std::promise<void> may_release;
  std::promise<void> may_finish;
  std::atomic<int> stage{0};
  writer.submit(
      [&] {
        may_release.get_future().wait();
        stage = 1;
        writer.release_gate();
        may_finish.get_future().wait();
        stage = 2;
      },
      /*holds_gate=*/true);
  auto gate = std::async(std::launch::async, [&] { return writer.wait_for_gate(); });
  CHECK(gate.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout);
  CHECK_FALSE(writer.state().idle);
  may_release.set_value();
  gate.get();
  CHECK(stage.load() >= 1);
  CHECK_FALSE(writer.state().idle);  // released, still writing
  may_finish.set_value();
  writer.wait_idle();
  CHECK(stage.load() == 2);
  CHECK(writer.state().idle);
  CHECK(writer.state().first_error.empty());
}

TEST_CASE("a job that throws before it releases opens the gate and leaves its error", "[background_writer]") {
  BackgroundWriter writer;
  writer.submit([] { throw std::runtime_error("disk full"); }, /*holds_gate=*/true);
  writer.wait_for_gate();  // returns: the gate opened when the job ended
  writer.wait_idle();
  CHECK(writer.state().first_error == "disk full");
  writer.submit([] { throw std::runtime_error("a later failure"); }, /*holds_gate=*/false);
  writer.wait_idle();
  CHECK(writer.state().first_error == "disk full");  // the first one stays: it names the cause
}

TEST_CASE("a job without the gate never blocks the training thread", "[background_writer]") {
  BackgroundWriter writer;
  std::promise<void> may_finish;
  writer.submit([&] { may_finish.get_future().wait(); }, /*holds_gate=*/false);
  CHECK(writer.wait_for_gate() < 10.0);  // returns while the job still runs
  CHECK_FALSE(writer.state().idle);
  may_finish.set_value();
  writer.wait_idle();
}

TEST_CASE("a writer destroyed mid-job stops the job at its next check", "[background_writer]") {
  std::atomic<int> pieces{0};
  std::atomic<bool> cancelled{false};
  std::promise<void> started;
  {
    BackgroundWriter writer;
    writer.submit(
        [&] {
          try {
            for (;;) {
              writer.throw_if_stopping();
              if (++pieces == 1) started.set_value();  // one piece done, the writer not yet stopping
              std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
          } catch (const std::exception&) {
            cancelled = true;
            throw;
          }
        },
        /*holds_gate=*/true);
    started.get_future().wait();
  }  // joins: returns only because the job stopped
  CHECK(cancelled.load());
  CHECK(pieces.load() >= 1);
}

TEST_CASE("the slice walk cuts a unit-flat range at parameter borders", "[background_writer][slices]") {
  using meshrun::trainer::ParamSlice;
  meshrun::trainer::UnitSpec unit;
  unit.name = "block0";
  const auto param = [](std::string name, std::vector<int64_t> shape) {
    meshrun::trainer::ParamSpec p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    return p;
  };
  unit.params = {param("a", {4}), param("b", {2, 3}), param("c", {5})};  // elements [0,4) [4,10) [10,15)
  struct Seen {
    std::string name;
    int64_t begin, count, at;
  };
  std::vector<Seen> seen;
  const auto walk = [&](int64_t lo, int64_t hi) {
    seen.clear();
    meshrun::trainer::for_each_param_slice(unit, lo, hi, [&](const ParamSlice& s) {
      seen.push_back({s.param.name, s.begin, s.count, s.at});
    });
  };
  walk(2, 12);
  REQUIRE(seen.size() == 3);
  CHECK((seen[0].name == "a" && seen[0].begin == 2 && seen[0].count == 2 && seen[0].at == 2));
  CHECK((seen[1].name == "b" && seen[1].begin == 0 && seen[1].count == 6 && seen[1].at == 4));
  CHECK((seen[2].name == "c" && seen[2].begin == 0 && seen[2].count == 2 && seen[2].at == 10));
  walk(4, 10);  // exactly one parameter
  REQUIRE(seen.size() == 1);
  CHECK((seen[0].name == "b" && seen[0].count == 6));
  walk(15, 20);  // padding past the last parameter: nothing
  CHECK(seen.empty());
}
