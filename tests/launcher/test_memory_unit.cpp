// In-memory copies (issue 30, stage 1): the slot policy of a node's shelf, the check of a copy's header, and a
// slot (memfd) handed over a SEQPACKET socket as a worker gets it.
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcntl.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <vector>

#include "common/fd_passing.hpp"
#include "launcher/memory/copy_shelf.hpp"
#include "launcher/memory/memfd_slot.hpp"
#include "proto/memory_copy.hpp"

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
