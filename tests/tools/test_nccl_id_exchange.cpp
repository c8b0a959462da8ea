// The NCCL unique id exchange of meshrun-nccl-bench against an in-process daemon on 127.0.0.1: rank 0's
// id reaches a waiting rank, a missing id times out naming the key and rank 0, a wrong-sized one is refused.
#include <catch2/catch.hpp>

#include <future>

#include "common/error.hpp"
#include "support/daemon.hpp"
#include "tools/nccl_bench/nccl_id_exchange.hpp"

using namespace meshrun;
using namespace meshrun::tools;
using namespace std::chrono_literals;

TEST_CASE("the NCCL unique id travels from rank 0 through the store", "[nccl][store]") {
  testing::TestDaemon daemon;
  auto rank0 = daemon.client();
  auto rank1 = daemon.client();
  const std::string id(128, '\x5a');
  auto waiting = std::async(
      std::launch::async, [&] { return exchange_unique_id(rank1, "meshrun/nccl-bench/0/unique_id", 1, "", 128, 10s); });
  CHECK(exchange_unique_id(rank0, "meshrun/nccl-bench/0/unique_id", 0, id, 128, 10s) == id);
  CHECK(waiting.get() == id);

  SECTION("a rank whose id never comes is told which key and rank 0") {
    try {
      exchange_unique_id(rank1, "meshrun/nccl-bench/9/unique_id", 3, "", 128, std::chrono::milliseconds(200));
      FAIL("no timeout");
    } catch (const TimeoutError& e) {
      CHECK(std::string(e.what()).find(
                "rank 3 did not receive the NCCL unique id (key 'meshrun/nccl-bench/9/unique_id'") == 0);
    }
  }
  SECTION("an id of the wrong size is refused") {
    rank0.set("meshrun/nccl-bench/7/unique_id", "short");
    CHECK_THROWS_AS(exchange_unique_id(rank1, "meshrun/nccl-bench/7/unique_id", 1, "", 128, 1s), ProtocolError);
  }
}
