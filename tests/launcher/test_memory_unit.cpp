// In-memory copies (issue 30): the slot policy of a node's shelf (committed, durable and pinned steps; a
// resumed run), the replicas a buddy keeps, the restore plan over the nodes' inventories, the check of a
// copy's header, and a slot (memfd) handed over a SEQPACKET socket as a worker gets it.
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcntl.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/fd_passing.hpp"
#include "launcher/memory/copy_shelf.hpp"
#include "launcher/memory/memfd_slot.hpp"
#include "launcher/memory/memory_budget.hpp"
#include "launcher/memory/replica_shelf.hpp"
#include "launcher/memory/restore_plan.hpp"
#include "proto/worker/memory_copy.hpp"

using namespace meshrun::launcher;
using meshrun::proto::CopyHeader;
using meshrun::proto::CopyState;

namespace {

// Lends a slot of `rank` for `step` and seals it; the slot it used.
int write_copy(CopyShelf& shelf, int rank, int64_t step) {
  const auto lent = shelf.lend(rank, step);
  REQUIRE(lent.slot);
  REQUIRE(shelf.seal(rank, *lent.slot, step).empty());
  return *lent.slot;
}

// A sealed header for a slot of `slot_size` bytes, its check written last as the trainer does.
CopyHeader sealed_header(uint64_t slot_size) {
  CopyHeader h;
  std::copy(std::begin(meshrun::proto::kCopyMagic), std::end(meshrun::proto::kCopyMagic), h.magic);
  h.state = CopyState::kSealed;
  h.step = 12;
  h.index_offset = meshrun::proto::kHeaderBytes;
  h.index_bytes = 100;
  h.index_capacity = 4096;
  h.payload_offset = h.index_offset + h.index_capacity;
  h.payload_bytes = slot_size - h.payload_offset;
  h.header_check = meshrun::proto::header_check_of(h);
  return h;
}

std::vector<char> slot_with(const CopyHeader& h, uint64_t slot_size) {
  std::vector<char> slot(slot_size, 0);
  std::memcpy(slot.data(), &h, sizeof h);
  return slot;
}

}  // namespace

TEST_CASE("shelf: the newest committed copy is never lent", "[memory]") {
  CopyShelf shelf;
  const int committed = write_copy(shelf, 0, 4);
  shelf.commit(0, 4);
  const int other = write_copy(shelf, 0, 8);  // not committed: another rank did not seal step 8
  CHECK(other != committed);
  for (int64_t step : {12, 16}) {
    const auto lent = shelf.lend(0, step);
    REQUIRE(lent.slot);
    CHECK(*lent.slot == other);
    REQUIRE(shelf.seal(0, *lent.slot, step).empty());
  }
  CHECK(shelf.candidates(0) == std::vector<int64_t>{4});
  shelf.commit(0, 16);
  CHECK(shelf.candidates(0) == std::vector<int64_t>{16, 4});
  // Now step 16 is the protected one: the next copy overwrites step 4's slot, which stops being a candidate.
  const auto next = shelf.lend(0, 20);
  REQUIRE(next.slot);
  CHECK(*next.slot == committed);
  CHECK(shelf.candidates(0) == std::vector<int64_t>{16});
}

TEST_CASE("shelf: a worker gone mid-copy leaves its slot torn and the committed copy standing", "[memory]") {
  CopyShelf shelf;
  write_copy(shelf, 3, 4);
  shelf.commit(3, 4);
  const auto lent = shelf.lend(3, 8);
  REQUIRE(lent.slot);
  shelf.on_disconnect(3);
  CHECK(shelf.slots(3)[static_cast<size_t>(*lent.slot)].state == SlotState::kTorn);
  CHECK(shelf.candidates(3) == std::vector<int64_t>{4});
  CHECK_FALSE(shelf.seal(3, *lent.slot, 8).empty());  // a late seal of the torn slot is refused
  shelf.commit(3, 8);                                 // and a commit of the step it never held changes nothing
  CHECK(shelf.candidates(3) == std::vector<int64_t>{4});
  // The restarted worker gets the torn slot first.
  const auto again = shelf.lend(3, 8);
  REQUIRE(again.slot);
  CHECK(*again.slot == *lent.slot);
}

TEST_CASE("shelf: one copy in flight per rank, and a seal names the slot and step it expected", "[memory]") {
  CopyShelf shelf;
  const auto first = shelf.lend(1, 4);
  REQUIRE(first.slot);
  const auto second = shelf.lend(1, 8);
  CHECK_FALSE(second.slot);
  CHECK_THAT(second.busy_reason, Catch::Contains("step 4") && Catch::Contains("in flight"));
  CHECK(shelf.lend(2, 8).slot);  // other ranks are not held up
  CHECK_THAT(shelf.seal(1, *first.slot, 5), Catch::Contains("lent for step 4, not 5"));
  CHECK_THAT(shelf.seal(1, 7, 4), Catch::Contains("no slot 7"));
  CHECK(shelf.seal(1, *first.slot, 4).empty());
  CHECK(shelf.candidates(1).empty());  // sealed, never committed
}

TEST_CASE("copy header: sealed passes, and torn, damaged or overflowing copies are refused with the reason",
          "[memory]") {
  const uint64_t size = meshrun::proto::slot_bytes(4096, 8192);
  CHECK(size == 4 * 4096);  // header page, index page, two payload pages
  const CopyHeader good = sealed_header(size);
  CHECK(meshrun::proto::validate_header(slot_with(good, size).data(), size).empty());

  CHECK_THAT(meshrun::proto::validate_header(std::vector<char>(size, 0).data(), size), Catch::Contains("empty"));
  CopyHeader torn = good;
  torn.state = CopyState::kWriting;
  CHECK_THAT(meshrun::proto::validate_header(slot_with(torn, size).data(), size), Catch::Contains("torn"));
  auto flipped = slot_with(good, size);
  flipped[offsetof(CopyHeader, step)] ^= 1;
  CHECK_THAT(meshrun::proto::validate_header(flipped.data(), size), Catch::Contains("check does not match"));
  CopyHeader long_payload = good;
  long_payload.payload_bytes += 1;
  long_payload.header_check = meshrun::proto::header_check_of(long_payload);
  CHECK_THAT(meshrun::proto::validate_header(slot_with(long_payload, size).data(), size),
             Catch::Contains("beyond the slot"));
  // Crafted sizes whose sums wrap around 2^64 (and would pass a check written as `offset + bytes <= size`).
  const auto crafted = [&](auto change) {
    CopyHeader h = good;
    change(h);
    h.header_check = meshrun::proto::header_check_of(h);
    return meshrun::proto::validate_header(slot_with(h, size).data(), size);
  };
  CHECK_THAT(crafted([](CopyHeader& h) { h.payload_bytes = ~uint64_t{0} - h.payload_offset + 2; }),
             Catch::Contains("beyond the slot"));
  CHECK_THAT(crafted([](CopyHeader& h) { h.payload_offset = ~uint64_t{0}; }), Catch::Contains("beyond the slot"));
  CHECK_THAT(crafted([](CopyHeader& h) {
               h.index_capacity = ~uint64_t{0} - h.index_offset + 1;  // index_offset + capacity wraps to 0
               h.index_bytes = 4096 * 1024;
             }),
             Catch::Contains("beyond the slot"));
  CHECK(meshrun::proto::range_within(0, size, size));
  CHECK_FALSE(meshrun::proto::range_within(1, ~uint64_t{0}, size));
  CHECK_FALSE(meshrun::proto::range_within(size + 1, 0, size));
}

TEST_CASE("slot: a memfd handed over a SEQPACKET socket is written by the receiver and checked by the owner",
          "[memory]") {
  using namespace std::chrono_literals;
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0);
  meshrun::UniqueFd agent_end(pair[0]), worker_end(pair[1]);
  const uint64_t size = meshrun::proto::slot_bytes(4096, 8192);
  MemfdSlot slot("meshrun-memory test rank0 slot0", size);
  CHECK(slot.bytes() == size);
  CHECK_THAT(slot.check(), Catch::Contains("empty"));

  meshrun::send_packet(agent_end.get(), R"({"op":"granted"})", {slot.fd()});
  auto packet = meshrun::receive_packet(worker_end.get(), 5000ms);
  REQUIRE(packet.fds.size() == 1);
  CHECK(packet.text == R"({"op":"granted"})");
  CHECK((::fcntl(packet.fds[0].get(), F_GETFD) & FD_CLOEXEC) != 0);
  CHECK(::ftruncate(packet.fds[0].get(), 1 << 20) != 0);  // sealed: the worker cannot resize it

  void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, packet.fds[0].get(), 0);
  REQUIRE(map != MAP_FAILED);
  CopyHeader header = sealed_header(size);
  header.state = CopyState::kWriting;  // what a worker killed mid-copy leaves
  header.header_check = meshrun::proto::header_check_of(header);
  std::memcpy(map, &header, sizeof header);
  CHECK_THAT(slot.check(), Catch::Contains("torn"));
  header.state = CopyState::kSealed;
  header.header_check = meshrun::proto::header_check_of(header);
  std::memcpy(map, &header, sizeof header);
  CHECK(slot.check().empty());
  CHECK(slot.read_header().step == 12);
  ::munmap(map, size);

  worker_end.reset();  // the worker is gone: the agent reads EOF
  CHECK(meshrun::receive_packet(agent_end.get(), 5000ms).closed);
}

TEST_CASE("shelf: the newest durable step and a copy being pushed are kept too, and the reason says so", "[memory]") {
  CopyShelf shelf(2);
  write_copy(shelf, 0, 5);
  shelf.commit(0, 5);
  shelf.durable(0, 5);
  write_copy(shelf, 0, 10);
  shelf.commit(0, 10);  // 10 is committed, 5 durable: replication is behind, both must stay
  const auto busy = shelf.lend(0, 15);
  REQUIRE_FALSE(busy.slot);
  CHECK_THAT(busy.busy_reason,
             Catch::Contains("10 (the newest committed)") && Catch::Contains("5 (the newest on every buddy)"));
  shelf.durable(0, 10);  // 10 reached every buddy: 5 may go, unless it is being sent
  shelf.pin(0, 5);
  shelf.pin(0, 5);  // pushed and fetched at once: both must end
  CHECK_THAT(shelf.lend(0, 15).busy_reason, Catch::Contains("5 (being sent to another node)"));
  shelf.unpin(0, 5);
  CHECK_FALSE(shelf.lend(0, 15).slot);
  shelf.unpin(0, 5);
  const auto lent = shelf.lend(0, 15);
  REQUIRE(lent.slot);
  CHECK(shelf.candidates(0) == std::vector<int64_t>{10});
}

TEST_CASE("shelf: a resumed run drops the copies of steps it will do again, and rewrites a step in its slot",
          "[memory]") {
  CopyShelf shelf(2);
  write_copy(shelf, 0, 20);
  shelf.commit(0, 20);
  const int slot30 = write_copy(shelf, 0, 30);
  shelf.commit(0, 30);
  shelf.restored(0, 20);  // storage step 20 was loaded: the copy of 30 is from a past left behind
  CHECK(shelf.candidates(0) == std::vector<int64_t>{20});
  const auto again = shelf.lend(0, 25);
  REQUIRE(again.slot);
  CHECK(*again.slot == slot30);
  REQUIRE(shelf.seal(0, *again.slot, 25).empty());
  shelf.commit(0, 25);
  // Step 25 written again (another restart from 20): its own slot is reused, 20 (durable) stays.
  const auto rewrite = shelf.lend(0, 25);
  REQUIRE(rewrite.slot);
  CHECK(*rewrite.slot == slot30);
  CHECK(shelf.candidates(0) == std::vector<int64_t>{20});
}

TEST_CASE("replicas: a push never overwrites the newest complete copy of its rank", "[memory]") {
  ReplicaShelf replicas;
  const auto first = replicas.place(3, 5, 0);
  REQUIRE(first.slot);
  replicas.complete(3, *first.slot, {ReplicaView::State::kComplete, 5, 4, 9, 0});
  const auto second = replicas.place(3, 10, 0);
  REQUIRE(second.slot);
  CHECK(*second.slot != *first.slot);
  CHECK_FALSE(replicas.place(3, 15, 0).slot);  // one push of a rank at a time
  replicas.failed(3, *second.slot);            // the sender died mid-push: 5 still stands
  CHECK(replicas.slot_of(3, 5) == first.slot);
  CHECK_FALSE(replicas.slot_of(3, 10));
  const auto again = replicas.place(3, 5, 0);
  CHECK(again.have);  // already held: nothing to send
  const auto held = replicas.held();
  REQUIRE(held.size() == 1);
  CHECK(held[0].copy.world_size == 4);
  // Step 5 made again in round 1 (the run resumed from before it): the new copy replaces the old one.
  const auto redone = replicas.place(3, 5, 1);
  CHECK_FALSE(redone.have);
  CHECK(redone.slot == first.slot);
}

TEST_CASE("replicas: a rank no push of this round renews is stale once a newer step is durable", "[memory]") {
  ReplicaShelf replicas;
  // Round 0: this node backed rank 1. Round 1: it backs rank 2 (a new ring), whose push of 15 is complete,
  // and a push of rank 4's 15 is still filling.
  replicas.complete(1, *replicas.place(1, 10, 0).slot, {ReplicaView::State::kComplete, 10, 3, 9, 0});
  replicas.complete(2, *replicas.place(2, 15, 1).slot, {ReplicaView::State::kComplete, 15, 3, 9, 1});
  replicas.complete(3, *replicas.place(3, 20, 0).slot, {ReplicaView::State::kComplete, 20, 3, 9, 0});
  REQUIRE(replicas.place(4, 15, 1).slot);
  CHECK(replicas.stale(10, 1).empty());                 // rank 1's 10 is as new as what is durable
  CHECK(replicas.stale(15, 1) == std::vector<int>{1});  // rank 2 is this round's, rank 3's 20 newer, 4 filling
  CHECK(replicas.stale(25, 1) == std::vector<int>{1, 3});
  CHECK(replicas.stale(25, 0).empty());  // in the round that made them, every replica is renewed by its pushes
}

namespace {

Inventory inventory(int node, std::vector<HeldCopy> copies) {
  return {node, "host" + std::to_string(node), "10.0.0." + std::to_string(node + 1), 4000 + node, std::move(copies)};
}

}  // namespace

TEST_CASE("plan: the newest step every rank holds on a live node, this node's copies first", "[memory]") {
  constexpr uint64_t kRun = 77;
  // World 3, one rank per node. Node 1 was lost; a spare is node 1 now and holds nothing. Node 2 holds its own
  // rank 2 and, as node 1's buddy, rank 1's replicas; node 0 holds rank 0 and rank 2's replicas.
  std::map<int, Inventory> nodes{
      {0, inventory(
              0, {{0, 10, 3, kRun, false}, {0, 15, 3, kRun, false}, {2, 10, 3, kRun, true}, {2, 15, 3, kRun, true}})},
      {1, inventory(1, {})},
      {2, inventory(2, {{2, 10, 3, kRun, false}, {2, 15, 3, kRun, false}, {1, 10, 3, kRun, true}})},
  };
  const RestorePlan plan = plan_restore(nodes, 3, 1);
  REQUIRE(plan.candidates.size() == 1);  // 15 lacks rank 1: its replica had not arrived
  CHECK(plan.candidates[0].step == 10);
  CHECK(plan.candidates[0].holders.at(1).node == 2);
  CHECK(plan.candidates[0].holders.at(1).port == 4002);
  CHECK(plan.candidates[0].holders.at(2).node == 0);                       // the lowest node when this one holds none
  CHECK(plan_restore(nodes, 3, 2).candidates[0].holders.at(2).node == 2);  // node 2 takes its own

  // Node 1 and its buddy node 2 both lost: rank 1 is nowhere; the reason names it.
  nodes[2] = inventory(2, {});
  const RestorePlan none = plan_restore(nodes, 3, 1);
  CHECK(none.candidates.empty());
  CHECK_THAT(none.why_none, Catch::Contains("step 15 lacks the copies of rank(s) 1 "));
  // Copies of another run's config never count.
  std::map<int, Inventory> mixed{{0, inventory(0, {{0, 5, 2, kRun, false}})},
                                 {1, inventory(1, {{1, 5, 2, kRun + 1, false}})}};
  CHECK(plan_restore(mixed, 2, 0).candidates.empty());
  // An inventory survives its trip through the store.
  const Inventory round_trip = nlohmann::json(nodes[0]).get<Inventory>();
  CHECK(round_trip.copies.size() == 4);
  CHECK(round_trip.copies[2].replica);
  CHECK(round_trip.addr == "10.0.0.1");
}

TEST_CASE("budget: the room is the least of MemAvailable and every cgroup limit above, and half may be taken",
          "[memory]") {
  constexpr uint64_t kMiB = 1 << 20;
  std::map<std::string, std::string> files{
      {"/proc/meminfo", "MemTotal:       24000000 kB\nMemAvailable:    8388608 kB\n"},  // 8 GiB
      {"/proc/self/cgroup", "0::/job/node1\n"},
      {"/sys/fs/cgroup/job/node1/memory.max", "max\n"},  // no limit of its own
      {"/sys/fs/cgroup/job/node1/memory.current", "4096\n"},
      {"/sys/fs/cgroup/job/memory.max", "2147483648\n"},      // 2 GiB ...
      {"/sys/fs/cgroup/job/memory.current", "1073741824\n"},  // ... of which 1 GiB is used
  };
  const ReadText read = [&](const std::string& path) -> std::optional<std::string> {
    const auto it = files.find(path);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
  const MemoryRoom room = memory_room(read);
  CHECK(room.bytes == 1024 * kMiB);
  CHECK(room.bound == "cgroup /job memory.max 2.00 GiB");
  CHECK(budget_refusal(512 * kMiB, room).empty());
  CHECK_THAT(budget_refusal(600 * kMiB, room),
             Catch::Contains("need 0.59 GiB more on this node and it has 1.00 GiB to spare (cgroup /job memory.max"));
  files.erase("/sys/fs/cgroup/job/memory.max");  // no limit anywhere: the kernel's MemAvailable
  CHECK(memory_room(read).bytes == 8192 * kMiB);
  CHECK(memory_room(read).bound == "MemAvailable");
  files.clear();  // nothing to read: no check, rather than a refusal on a guess
  CHECK_FALSE(memory_room(read).known);
  CHECK(budget_refusal(1ULL << 40, memory_room(read)).empty());
  // cgroup v1 (a hybrid host: v2 mounted without controllers, memory on its own hierarchy).
  files = {
      {"/proc/meminfo", "MemAvailable:    8388608 kB\n"},
      {"/proc/self/cgroup", "5:devices:/\n4:cpuacct,memory:/slurm/job7\n0::/\n"},
      {"/sys/fs/cgroup/memory/slurm/job7/memory.limit_in_bytes", "1610612736\n"},      // 1.5 GiB ...
      {"/sys/fs/cgroup/memory/slurm/job7/memory.usage_in_bytes", "536870912\n"},       // ... 0.5 GiB used
      {"/sys/fs/cgroup/memory/slurm/memory.limit_in_bytes", "9223372036854771712\n"},  // v1's "no limit"
      {"/sys/fs/cgroup/memory/slurm/memory.usage_in_bytes", "536870912\n"},
  };
  CHECK(memory_room(read).bytes == 1024 * kMiB);
  CHECK(memory_room(read).bound == "cgroup /slurm/job7 memory.limit_in_bytes 1.50 GiB");
}

TEST_CASE("plan: after the job shrank, a whole world of the old size is a candidate, this size first", "[memory]") {
  constexpr uint64_t kRun = 77;
  // Three ranks' copies of step 30 on the two nodes left (node 0 holds rank 2's as node 2's buddy); step 35 of
  // the new two-rank layout is also whole.
  std::map<int, Inventory> nodes{
      {0, inventory(0, {{0, 30, 3, kRun, false}, {2, 30, 3, kRun, true}, {0, 35, 2, kRun, false}})},
      {1, inventory(1, {{1, 30, 3, kRun, false}, {1, 35, 2, kRun, false}, {0, 35, 3, kRun, true}})},
  };
  RestorePlan plan = plan_restore(nodes, 2, 0);
  REQUIRE(plan.candidates.size() == 2);
  CHECK(plan.candidates[0].step == 35);
  CHECK(plan.candidates[0].world_size == 2);
  CHECK(plan.candidates[1].step == 30);
  CHECK(plan.candidates[1].world_size == 3);  // resharded from 3 ranks
  CHECK(plan.candidates[1].holders.at(2).node == 0);
  // The same step in both layouts: the round's own first.
  nodes[0].copies.push_back({1, 35, 3, kRun, false});
  nodes[1].copies.push_back({2, 35, 3, kRun, false});
  plan = plan_restore(nodes, 2, 0);
  REQUIRE(plan.candidates.size() >= 2);
  CHECK(plan.candidates[0].world_size == 2);
  CHECK(plan.candidates[1].step == 35);
  CHECK(plan.candidates[1].world_size == 3);
}
