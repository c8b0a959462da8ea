#include <catch2/catch.hpp>

#include "rendezvous/kv_store.hpp"

using meshrun::rendezvous::KvStore;
using meshrun::rendezvous::WaitId;

TEST_CASE("store operations follow TCPStore semantics", "[kv_store]") {
  KvStore store;
  std::vector<WaitId> woken;
  CHECK(store.add("c", 5, woken) == 5);
  CHECK(store.add("c", -7, woken) == -2);
  CHECK(store.get("c") == "-2");
  SECTION("compare_set") {
    CHECK(store.compare_set("k", "", "first", woken) == "first");   // absent + empty expected: created
    CHECK(store.compare_set("k", "wrong", "x", woken) == "first");  // mismatch: unchanged
    CHECK(store.compare_set("k", "first", "second", woken) == "second");
    CHECK(store.compare_set("absent", "exp", "x", woken) == "exp");  // absent + non-empty expected: nothing stored
    CHECK_FALSE(store.contains("absent"));
  }
  SECTION("append creates then extends") {
    store.append("a", "x");
    store.append("a", "y");
    CHECK(store.get("a") == "xy");
  }
  SECTION("add reads the stored number as std::stoll does, and refuses text without one") {
    for (const auto& [stored, want] :
         std::vector<std::pair<std::string, int64_t>>{{" 7", 8}, {"12abc", 13}, {"1.5", 2}, {"-3", -2}, {"+4", 5}}) {
      store.set("n", stored);
      CHECK(store.add("n", 1, woken) == want);
    }
    store.set("s", "text");
    CHECK_THROWS_AS(store.add("s", 1, woken), std::invalid_argument);
    store.set("s", "99999999999999999999");
    CHECK_THROWS_AS(store.add("s", 1, woken), std::out_of_range);
  }
  SECTION("a non-empty queue exists, an emptied one does not") {
    store.queue_push("q", "x");
    CHECK(store.exists("q"));
    CHECK_FALSE(store.contains("q"));  // not a plain value
    store.queue_pop("q");
    CHECK_FALSE(store.exists("q"));
  }
  SECTION("erase and size") {
    CHECK(store.size() == 1);
    CHECK(store.erase("c"));
    CHECK_FALSE(store.erase("c"));
    CHECK(store.size() == 0);
  }
}

TEST_CASE("waits are released only when all their keys exist", "[kv_store]") {
  KvStore store;
  CHECK_FALSE(store.add_wait(1, {"a", "b"}));
  CHECK_FALSE(store.add_wait(2, {"b"}));
  CHECK(store.set("a", "1").empty());
  auto woken = store.set("b", "2");
  std::sort(woken.begin(), woken.end());
  CHECK(woken == std::vector<WaitId>{1, 2});
  CHECK(store.pending_waits() == 0);
  CHECK(store.add_wait(3, {"a", "b"}));  // already there: no registration
}

TEST_CASE("a cancelled wait is never woken", "[kv_store]") {
  KvStore store;
  CHECK_FALSE(store.add_wait(7, {"k"}));
  CHECK(store.cancel_wait(7));
  CHECK_FALSE(store.cancel_wait(7));
  CHECK(store.set("k", "v").empty());
}

TEST_CASE("queues pop in order and wake one waiter per push", "[kv_store]") {
  KvStore store;
  CHECK_FALSE(store.add_wait(1, {"q"}));
  CHECK_FALSE(store.add_wait(2, {"q"}));
  CHECK(store.queue_push("q", "a") == std::vector<WaitId>{1});
  CHECK(store.queue_push("q", "b") == std::vector<WaitId>{2});
  CHECK(store.queue_len("q") == 2);
  CHECK(store.queue_pop("q") == "a");
  CHECK(store.queue_pop("q") == "b");
  CHECK_FALSE(store.queue_pop("q").has_value());
}

TEST_CASE("barrier releases everyone when the last participant arrives", "[kv_store]") {
  KvStore store;
  std::vector<WaitId> woken;
  CHECK_FALSE(store.barrier("b", 3, 1, woken));
  CHECK_FALSE(store.barrier("b", 3, 2, woken));
  CHECK(woken.empty());
  CHECK(store.barrier("b", 3, 3, woken));
  std::sort(woken.begin(), woken.end());
  CHECK(woken == std::vector<WaitId>{1, 2});
  CHECK(store.get("b") == "3");
}
