// LibTorch's own C++ c10d::TCPStore client against our daemon: every operation, a wait released by
// another client, a wait that times out, and a barrier that holds its first party.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "tests/support/daemon.hpp"

using namespace std::chrono_literals;

namespace {
std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

c10::intrusive_ptr<c10d::TCPStore> connect(uint16_t port) {
  c10d::TCPStoreOptions opts;
  opts.port = port;
  opts.isServer = false;
  opts.waitWorkers = false;
  opts.timeout = 10s;
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
}
}  // namespace

TEST_CASE("LibTorch c10d::TCPStore works against meshrun-rendezvous", "[libtorch]") {
  meshrun::testing::TestDaemon daemon;
  auto store = connect(daemon.endpoint().port);
  auto other = connect(daemon.endpoint().port);

  store->set("key", bytes("value"));
  CHECK(text(other->get("key")) == "value");
  CHECK(store->add("n", 4) == 4);
  CHECK(other->add("n", 3) == 7);
  CHECK(text(store->compareSet("key", bytes("value"), bytes("v2"))) == "v2");
  CHECK(text(store->compareSet("key", bytes("nope"), bytes("v3"))) == "v2");
  CHECK(store->check({"key", "n"}));
  CHECK_FALSE(store->check({"key", "absent"}));
  store->append("ap", bytes("a"));
  store->append("ap", bytes("b"));
  CHECK(text(store->get("ap")) == "ab");
  store->multiSet({"m1", "m2"}, {bytes("1"), bytes("2")});
  const auto got = store->multiGet({"m1", "m2"});
  REQUIRE(got.size() == 2);
  CHECK(text(got[1]) == "2");
  CHECK(store->getNumKeys() == 5);
  CHECK(store->deleteKey("m2"));
  CHECK_FALSE(store->deleteKey("m2"));
  auto keys = store->listKeys();
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<std::string>{"ap", "key", "m1", "n"});
  store->queuePush("q", bytes("x"));
  CHECK(store->queueLen("q") == 1);
  CHECK(text(store->queuePop("q", false)) == "x");

  SECTION("a wait is released by another client's set") {
    std::thread setter([&] {
      std::this_thread::sleep_for(200ms);
      other->set("late", bytes("here"));
    });
    store->wait({"late"}, 10s);
    CHECK(text(store->get("late")) == "here");
    setter.join();
  }
  SECTION("a wait times out and the store stays usable") {
    CHECK_THROWS(store->wait({"never"}, 300ms));
    CHECK(text(store->get("key")) == "v2");
  }
  SECTION("a barrier holds the first party until the last one arrives") {
    std::atomic<bool> peer_passed{false};
    std::thread peer([&] {
      other->barrier("b", 2, 10s);
      peer_passed = true;
    });
    // The daemon counts arrivals in the barrier's key: a count of 1 means the peer is parked there.
    const auto end = std::chrono::steady_clock::now() + 10s;
    while (store->add("b", 0) < 1 && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(10ms);
    REQUIRE(store->add("b", 0) == 1);
    // Parked means parked: no release for as long as the second party stays away.
    for (int i = 0; i < 30 && !peer_passed; ++i) std::this_thread::sleep_for(10ms);
    CHECK_FALSE(peer_passed.load());
    store->barrier("b", 2, 10s);
    peer.join();
    CHECK(peer_passed.load());
    CHECK(store->add("b", 0) == 2);
  }
}
