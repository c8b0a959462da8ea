// The memory-copy handover (issue 30, stage 1) over its real socket: a server as the agent runs it, and
// workers as clients that write copies into lent memfds, die mid-copy, and read a copy back after a restart.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "common/endpoint.hpp"
#include "common/fd_passing.hpp"
#include "launcher/memory/inventory_exchange.hpp"
#include "launcher/memory/memfd_slot.hpp"
#include "launcher/memory/memory_keeper.hpp"
#include "launcher/memory/peer_auth.hpp"
#include "launcher/memory/peer_link.hpp"
#include "launcher/memory/peer_server.hpp"
#include "proto/worker/memory_copy.hpp"
#include "support/daemon_process.hpp"
#include "support/subprocess.hpp"

using meshrun::UniqueFd;
using meshrun::launcher::MemoryKeeper;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kPayload = 3 * 4096;
const uint64_t kSlotBytes = meshrun::proto::slot_bytes(4096, kPayload);
constexpr int kWorkerWorld = 2;  // the world Worker's copies are of

// A connection to the agent's handover socket at `path`.
UniqueFd connect_handover(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  REQUIRE(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

// A worker's end of the handover: connect, hello, then one request at a time.
class Worker {
 public:
  Worker(const std::string& path, int rank) : rank_(rank), fd_(connect_handover(path)) {
    auto granted = ask({{"op", "hello"}, {"rank", rank}, {"slot_bytes", kSlotBytes}, {"digest", 7}});
    REQUIRE(granted.first.at("op") == "granted");
    REQUIRE(granted.second.size() == 3);  // two slots and the control block
    granted.second.pop_back();
    slots_ = std::move(granted.second);
  }

  std::pair<json, std::vector<UniqueFd>> ask(const json& request) {
    meshrun::send_packet(fd_.get(), request.dump());
    auto packet = meshrun::receive_packet(fd_.get(), 5000ms);
    REQUIRE_FALSE(packet.timed_out);
    return {json::parse(packet.text), std::move(packet.fds)};
  }
  void tell(const json& message) { meshrun::send_packet(fd_.get(), message.dump()); }

  // Writes a copy of `step` whose payload bytes are all `fill`: header as writing, payload, header as sealed
  // (the last only when `finish`). Returns the slot it got.
  int write_copy(int64_t step, char fill, bool finish = true) {
    const auto [lend, fds] = ask({{"op", "begin"}, {"step", step}});
    REQUIRE(lend.at("op") == "lend");
    const int slot = lend.at("slot").get<int>();
    auto* map = static_cast<char*>(
        ::mmap(nullptr, kSlotBytes, PROT_READ | PROT_WRITE, MAP_SHARED, slots_[static_cast<size_t>(slot)].get(), 0));
    REQUIRE(map != MAP_FAILED);
    meshrun::proto::CopyHeader h{};
    std::memcpy(h.magic, meshrun::proto::kCopyMagic, sizeof h.magic);
    h.state = meshrun::proto::CopyState::kWriting;
    h.step = step;
    h.rank = rank_;
    h.world_size = kWorkerWorld;
    h.config_digest = 7;  // the digest its hello names
    h.index_offset = meshrun::proto::kHeaderBytes;
    h.index_capacity = 4096;
    h.payload_offset = h.index_offset + h.index_capacity;
    h.payload_bytes = kPayload;
    std::memcpy(map, &h, sizeof h);
    std::memset(map + h.payload_offset, fill, kPayload);
    if (finish) {
      h.state = meshrun::proto::CopyState::kSealed;
      h.header_check = meshrun::proto::header_check_of(h);
      std::memcpy(map, &h, sizeof h);
    }
    ::munmap(map, kSlotBytes);
    if (finish) REQUIRE(ask({{"op", "sealed"}, {"step", step}, {"slot", slot}}).first.at("op") == "kept");
    return slot;
  }

  // The payload's first byte of the committed copy of `step`, read through the descriptor the agent sends.
  char read_copy(int64_t step) {
    auto [reply, fds] = ask({{"op", "open"}, {"step", step}});
    REQUIRE(reply.at("op") == "copy");
    REQUIRE(fds.size() == 1);
    char byte = 0;
    REQUIRE(::pread(fds[0].get(), &byte, 1, static_cast<off_t>(2 * 4096)) == 1);
    return byte;
  }

 private:
  int rank_;
  UniqueFd fd_;
  std::vector<UniqueFd> slots_;
};

// Waits until the server has taken in what the workers told it (one-way messages).
void wait_for(const MemoryKeeper& server, int rank, const std::vector<int64_t>& want) {
  for (int i = 0; i < 500 && server.candidates(rank) != want; ++i) std::this_thread::sleep_for(10ms);
  CHECK(server.candidates(rank) == want);
}

}  // namespace

TEST_CASE("memory handover: a copy outlives the worker that wrote it and is read back by its successor", "[memory]") {
  meshrun::testing::TempDir dir;
  MemoryKeeper server(dir.path() + "/memory.sock", "meshrun-memory test", "run", "host");
  {
    Worker first(server.socket_path(), 0);
    first.write_copy(4, 'a');
    first.tell({{"op", "commit"}, {"step", 4}});
    wait_for(server, 0, {4});
  }  // the worker exits
  CHECK(server.held_bytes() == 2 * kSlotBytes);
  Worker second(server.socket_path(), 0);
  const auto [plan, none] = second.ask({{"op", "plan"}});
  REQUIRE(plan.at("candidates").size() == 1);
  CHECK(plan.at("candidates")[0].at("step") == 4);
  CHECK(second.read_copy(4) == 'a');
}

TEST_CASE("memory handover: a worker killed mid-copy leaves the previous committed copy, never the torn one",
          "[memory]") {
  meshrun::testing::TempDir dir;
  MemoryKeeper server(dir.path() + "/memory.sock", "meshrun-memory test", "run", "host");
  {
    Worker first(server.socket_path(), 1);
    first.write_copy(4, 'a');
    first.tell({{"op", "commit"}, {"step", 4}});
    first.write_copy(8, 'b', /*finish=*/false);  // dies before sealing step 8
  }
  wait_for(server, 1, {4});
  Worker second(server.socket_path(), 1);
  const auto [refused, none] = second.ask({{"op", "open"}, {"step", 8}});
  CHECK(refused.at("op") == "error");
  CHECK_THAT(refused.at("reason").get<std::string>(), Catch::Contains("no committed copy of step 8"));
  CHECK(second.read_copy(4) == 'a');
  // The torn slot is the one lent next; step 4's copy stays.
  const int slot = second.write_copy(12, 'c');
  second.tell({{"op", "commit"}, {"step", 12}});
  wait_for(server, 1, {12, 4});
  CHECK(second.read_copy(4) == 'a');
  CHECK(second.read_copy(12) == 'c');
  (void)slot;
}

TEST_CASE("memory handover: a sealed message for a copy whose header is not sealed keeps nothing", "[memory]") {
  meshrun::testing::TempDir dir;
  MemoryKeeper server(dir.path() + "/memory.sock", "meshrun-memory test", "run", "host");
  Worker worker(server.socket_path(), 2);
  const int slot = worker.write_copy(4, 'a', /*finish=*/false);
  // A lie: the header still says writing. The agent says so, and the worker counts its copy as not made.
  const auto [refused, no_fds] = worker.ask({{"op", "sealed"}, {"step", 4}, {"slot", slot}});
  CHECK(refused.at("op") == "refused");
  CHECK_THAT(refused.at("reason").get<std::string>(), Catch::Contains("torn"));
  worker.tell({{"op", "commit"}, {"step", 4}});
  const auto [plan, none] = worker.ask({{"op", "plan"}});
  CHECK(plan.at("candidates").empty());
}

TEST_CASE("memory handover: a previous worker of the rank closing late tears nothing of its successor's", "[memory]") {
  meshrun::testing::TempDir dir;
  MemoryKeeper server(dir.path() + "/memory.sock", "meshrun-memory test", "run", "host");
  auto old_worker = std::make_unique<Worker>(server.socket_path(), 1);  // still exiting
  Worker successor(server.socket_path(), 1);
  const auto [lend, fds] = successor.ask({{"op", "begin"}, {"step", 8}});
  REQUIRE(lend.at("op") == "lend");
  old_worker.reset();  // its connection ends while the successor writes
  std::this_thread::sleep_for(100ms);
  // The successor's copy is still lent to it: it can finish and seal it (write_copy asks for a new lend).
  const auto [again, none] = successor.ask({{"op", "begin"}, {"step", 8}});
  CHECK(again.at("op") == "busy");  // one copy in flight, still its own
}

namespace {

// Pids of processes holding a descriptor whose link names `marker` (a memfd shows as "/memfd:NAME (deleted)").
std::vector<pid_t> holders_of(const std::string& marker) {
  std::vector<pid_t> out;
  for (const auto& proc : std::filesystem::directory_iterator("/proc")) {
    const std::string name = proc.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code ec;
    for (const auto& fd : std::filesystem::directory_iterator(proc.path() / "fd", ec)) {
      const auto link = std::filesystem::read_symlink(fd.path(), ec);
      if (!ec && link.string().find(marker) != std::string::npos) {
        out.push_back(std::stoi(name));
        break;
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("memory handover: after a kill -9 of meshrun no process holds its copies", "[memory][launch]") {
  meshrun::testing::TempDir dir;
  meshrun::testing::Process job(
      {MESHRUN_BIN, "--standalone", "--nproc-per-node", "2", TEST_WORKER_BIN, "memory-hold", dir.path()}, {},
      dir.path() + "/job.out");
  for (int r = 0; r < 2; ++r) {
    REQUIRE(meshrun::testing::wait_for_file(dir.path() + "/memory." + std::to_string(r), std::chrono::seconds(30)));
    CHECK(meshrun::testing::read_file(dir.path() + "/memory." + std::to_string(r)) ==
          "3");  // two slots and a control block each
  }
  const std::string marker = "meshrun-memory ";
  const std::string agent = "agent" + std::to_string(job.pid()) + " ";
  const auto before = holders_of(marker + "");
  CHECK(before.size() >= 3);  // the agent and both workers
  job.signal(SIGKILL);
  job.wait();
  std::vector<pid_t> left = holders_of(agent);
  for (int i = 0; i < 1000 && !left.empty(); ++i) {
    std::this_thread::sleep_for(10ms);
    left = holders_of(agent);
  }
  INFO(job.output());
  CHECK(left.empty());
}

namespace {

// A sealed copy of `step` of `rank` in a memfd of kSlotBytes, its payload bytes all `fill`.
std::unique_ptr<meshrun::launcher::MemfdSlot> copy_image(int rank, int64_t step, char fill) {
  auto slot = std::make_unique<meshrun::launcher::MemfdSlot>("test copy", kSlotBytes);
  auto* map = static_cast<char*>(::mmap(nullptr, kSlotBytes, PROT_READ | PROT_WRITE, MAP_SHARED, slot->fd(), 0));
  REQUIRE(map != MAP_FAILED);
  meshrun::proto::CopyHeader h{};
  std::memcpy(h.magic, meshrun::proto::kCopyMagic, sizeof h.magic);
  h.state = meshrun::proto::CopyState::kSealed;
  h.step = step;
  h.rank = rank;
  h.world_size = 4;
  h.config_digest = 7;
  h.index_offset = meshrun::proto::kHeaderBytes;
  h.index_capacity = 4096;
  h.payload_offset = h.index_offset + h.index_capacity;
  h.payload_bytes = kPayload;
  h.header_check = meshrun::proto::header_check_of(h);
  std::memcpy(map, &h, sizeof h);
  std::memset(map + h.payload_offset, fill, kPayload);
  ::munmap(map, kSlotBytes);
  return slot;
}

json push_request(const std::string& run, int rank, int64_t step, int world_size = 4) {
  return {{"op", "push"},        {"run", run}, {"rank", rank}, {"step", step}, {"world_size", world_size},
          {"bytes", kSlotBytes}, {"digest", 7}};
}

// The replicas of other nodes' ranks the keeper lists: (rank, step) pairs.
std::vector<std::pair<int, int64_t>> replicas_of(const MemoryKeeper& keeper) {
  std::vector<std::pair<int, int64_t>> out;
  for (const auto& c : keeper.inventory().copies) {
    if (c.replica) out.emplace_back(c.rank, c.step);
  }
  return out;
}

}  // namespace

namespace {

constexpr const char* kSecret = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

// Node `node` of a round of `nodes` nodes (2 ranks each, world 2 x nodes, `round`), with the run's secret,
// backing the node before it in the ring.
meshrun::launcher::MemoryAttempt round_of(const meshrun::Endpoint& store, int64_t round, int node, int nodes = 2) {
  const int backed = (node + nodes - 1) % nodes;
  return {.store = store,
          .round = round,
          .node = node,
          .nodes = nodes,
          .world_size = 2 * nodes,
          .steps_done = 0,
          .addr = "127.0.0.1",
          .secret = kSecret,
          .backed_first = 2 * backed,
          .backed_count = 2};
}

// A copy of kSlotBytes in `memfd`, pushed on a proven connection as an agent pushes one: the bytes, then their tag.
void send_whole_copy(const meshrun::launcher::PeerConnection& peer, int memfd) {
  meshrun::Poly1305 mac(peer.data_key);
  meshrun::launcher::send_copy(peer.get(), memfd, kSlotBytes, mac);
  meshrun::launcher::send_copy_tag(peer.get(), mac);
}

// Waits until the keeper's copy port is open (a worker asked for copies).
int open_port(const MemoryKeeper& keeper) {
  for (int i = 0; i < 500 && keeper.copy_port() == 0; ++i) std::this_thread::sleep_for(10ms);
  return keeper.copy_port();
}

}  // namespace

TEST_CASE("copy port: a pushed copy is kept whole and fetched back byte for byte, a cut push keeps the older",
          "[memory]") {
  using namespace meshrun::launcher;
  meshrun::testing::TempDir dir;
  const meshrun::testing::DaemonProcess store(DAEMON_BIN, {}, dir.path() + "/daemon.log");
  MemoryKeeper buddy(dir.path() + "/memory.sock", "meshrun-memory test", "run", "host");
  buddy.begin_attempt(round_of(meshrun::parse_endpoint(store.endpoint(), 0), 1, 1));  // backs ranks 0-1
  const Worker own(buddy.socket_path(), 2);
  const int port = open_port(buddy);
  REQUIRE(port > 0);
  CHECK(buddy.inventory().port == port);
  const std::string key = buddy.copy_key();
  CHECK(key == kSecret);
  const auto five = copy_image(1, 5, 'x');
  {
    const auto peer = open_peer_request("127.0.0.1", port, key, push_request("run", 1, 5));
    REQUIRE(receive_frame(peer.get()).value("go", false));
    send_whole_copy(peer, five->fd());
    CHECK(receive_frame(peer.get()).value("ok", false));
  }
  CHECK(replicas_of(buddy) == std::vector<std::pair<int, int64_t>>{{1, 5}});

  // Another run's agent is refused, whatever it asks, and told nothing.
  {
    const auto peer = open_peer_request("127.0.0.1", port, key, push_request("other-run", 1, 6));
    CHECK(receive_frame(peer.get()) == kRefused);
  }
  // A sender that dies halfway through step 10 leaves step 5 as it was.
  {
    const auto ten = copy_image(1, 10, 'y');
    const auto peer = open_peer_request("127.0.0.1", port, key, push_request("run", 1, 10));
    REQUIRE(receive_frame(peer.get()).value("go", false));
    meshrun::Poly1305 mac(peer.data_key);
    send_copy(peer.get(), ten->fd(), kSlotBytes / 2, mac);
  }  // closed mid-copy

  // A fetch gets the copy back, byte for byte, whatever became of the cut push.
  const auto peer = open_peer_request("127.0.0.1", port, key, meshrun::proto::CopyPortRequest::fetch("run", 1, 5));
  const json reply = receive_frame(peer.get());
  REQUIRE(reply.value("ok", false));
  REQUIRE(reply.value("bytes", uint64_t{0}) == kSlotBytes);
  MemfdSlot into("test fetched", kSlotBytes);
  meshrun::Poly1305 mac(peer.data_key);
  receive_copy(peer.get(), into.fd(), kSlotBytes, mac);
  CHECK(into.check().empty());
  std::vector<char> got(kSlotBytes), want(kSlotBytes);
  REQUIRE(::pread(into.fd(), got.data(), kSlotBytes, 0) == static_cast<ssize_t>(kSlotBytes));
  REQUIRE(::pread(five->fd(), want.data(), kSlotBytes, 0) == static_cast<ssize_t>(kSlotBytes));
  CHECK(got == want);
  CHECK(replicas_of(buddy) == std::vector<std::pair<int, int64_t>>{{1, 5}});  // the cut push kept nothing
  // A step nobody holds: an error, not a hang.
  const auto again = open_peer_request("127.0.0.1", port, key, meshrun::proto::CopyPortRequest::fetch("run", 1, 99));
  CHECK_THAT(receive_frame(again.get()).value("error", ""), Catch::Contains("no copy of step 99"));
}

TEST_CASE("copy port: closed until a worker asks for copies in a job of several nodes, and only on the job's address",
          "[memory][security]") {
  using namespace meshrun::launcher;
  meshrun::testing::TempDir dir;
  const meshrun::testing::DaemonProcess store(DAEMON_BIN, {}, dir.path() + "/daemon.log");
  const auto endpoint = meshrun::parse_endpoint(store.endpoint(), 0);
  MemoryKeeper keeper(dir.path() + "/memory.sock", "meshrun-memory test", "run", "host");
  CHECK(keeper.copy_port() == 0);  // before any round
  keeper.begin_attempt(round_of(endpoint, 0, 0, 1));
  {
    const Worker alone(keeper.socket_path(), 0);  // copies asked for, but one node: nobody to serve
    CHECK(keeper.copy_port() == 0);
  }
  keeper.begin_attempt(round_of(endpoint, 1, 0));
  CHECK(keeper.copy_port() == 0);  // a job of two nodes whose workers asked for nothing yet
  const Worker asks(keeper.socket_path(), 0);
  const int port = open_port(keeper);
  REQUIRE(port > 0);
  // Bound to the job's address (127.0.0.1), not every interface: 127.0.0.2 is loopback too, and refused.
  CHECK_NOTHROW(connect_peer("127.0.0.1", port));
  CHECK_THROWS(connect_peer("127.0.0.2", port));
}

namespace {

// node 1's agent of a two-node round, holding rank 2's committed copy of step 5, its copy port open.
struct KeeperWithACopy {
  meshrun::testing::TempDir dir;
  meshrun::testing::DaemonProcess store{DAEMON_BIN, {}, dir.path() + "/daemon.log"};
  std::unique_ptr<MemoryKeeper> keeper =
      std::make_unique<MemoryKeeper>(dir.path() + "/memory.sock", "meshrun-memory test", "run", "host");
  std::unique_ptr<Worker> own;
  int port = 0;

  KeeperWithACopy() {
    keeper->begin_attempt(round_of(meshrun::parse_endpoint(store.endpoint(), 0), 1, 1));
    own = std::make_unique<Worker>(keeper->socket_path(), 2);
    own->write_copy(5, 'a');
    own->tell({{"op", "commit"}, {"step", 5}});
    wait_for(*keeper, 2, {5});
    port = open_port(*keeper);
    REQUIRE(port > 0);
  }
};

}  // namespace

TEST_CASE("copy port: a party that did not join the run can neither fetch nor push, and is told nothing",
          "[memory][security]") {
  using namespace meshrun::launcher;
  const KeeperWithACopy held;
  MemoryKeeper& keeper = *held.keeper;
  const int port = held.port;
  const json fetch = {{"op", "fetch"}, {"run", "run"}, {"rank", 2}, {"step", 5}};
  // Without the secret this side cannot even ask; with a guessed one, and the run id it stole, it is refused.
  CHECK_THROWS_WITH(open_peer_request("127.0.0.1", port, "", fetch), Catch::Contains("has not joined a round"));
  CHECK_THROWS_WITH(open_peer_request("127.0.0.1", port, std::string(64, '0'), fetch),
                    Catch::Contains("refused the request"));
  CHECK_THROWS_WITH(open_peer_request("127.0.0.1", port, std::string(64, '0'), push_request("run", 1, 6)),
                    Catch::Contains("refused the request"));
  // By hand, the way a stranger would: the hello names nothing, a request without a proof gets a bare refusal.
  const UniqueFd raw = connect_peer("127.0.0.1", port);
  const json hello = receive_frame(raw.get());
  CHECK(hello.size() == 1);
  CHECK(hello.contains("nonce"));
  send_frame(raw.get(), fetch);
  const json answer = receive_frame(raw.get());
  CHECK(answer == kRefused);
  CHECK(answer.dump().find("run") == std::string::npos);
  CHECK(replicas_of(keeper).empty());
  CHECK(keeper.candidates(2) == std::vector<int64_t>{5});  // still there, never sent
}

namespace {

// One byte a relay changes on its way: the `at`-th byte (from 0) that flows toward the agent, or toward the peer.
struct Flip {
  enum class Toward { kAgent, kPeer };
  Toward toward = Toward::kPeer;
  int64_t at = -1;  // -1: none
};

// A TCP relay on a port of its own, passing one connection's bytes both ways to 127.0.0.1:`to`: what a party that
// wrote a copy port of its own into the store would do to sit between two agents, or (dialled as if it were the
// agent itself) a router on the network path that changes a byte.
class Relay {
 public:
  explicit Relay(int to, Flip flip = {}) : listen_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof addr;
    REQUIRE(::bind(listen_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(listen_.get(), 1) == 0);
    REQUIRE(::getsockname(listen_.get(), reinterpret_cast<sockaddr*>(&addr), &length) == 0);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, to, flip] {
      const UniqueFd in(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      const UniqueFd out = meshrun::launcher::connect_peer("127.0.0.1", to);
      pollfd fds[2] = {{in.get(), POLLIN, 0}, {out.get(), POLLIN, 0}};
      char buf[65536];
      int64_t passed[2] = {0, 0};  // bytes that went toward the agent, toward the peer
      const int flip_from = flip.toward == Flip::Toward::kAgent ? 0 : 1;
      while (::poll(fds, 2, 10000) > 0) {
        const int from = fds[0].revents != 0 ? 0 : 1;
        const ssize_t n = ::read(fds[from].fd, buf, sizeof buf);
        if (n <= 0) break;
        if (from == flip_from && flip.at >= passed[from] && flip.at < passed[from] + n)
          buf[flip.at - passed[from]] ^= 1;
        passed[from] += n;
        if (::write(fds[1 - from].fd, buf, static_cast<size_t>(n)) != n) break;
        relayed_ += n;
      }
    });
  }
  ~Relay() { thread_.join(); }
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;
  int port() const { return port_; }
  int64_t relayed() const { return relayed_; }

 private:
  UniqueFd listen_;
  int port_ = 0;
  std::atomic<int64_t> relayed_{0};
  std::thread thread_;
};

}  // namespace

TEST_CASE("copy port: a relay between two agents is refused, and so is a forged inventory", "[memory][security]") {
  using namespace meshrun::launcher;
  const KeeperWithACopy held;
  MemoryKeeper& keeper = *held.keeper;
  const int port = held.port;
  const std::string key = keeper.copy_key();
  {
    // The peer knows the run's secret and dials the relay, believing it is the agent: its proof names the relay's
    // port, so the real agent refuses what the relay passes on, and no copy's byte goes through it.
    const Relay relay(port);
    CHECK_THROWS_WITH(
        open_peer_request("127.0.0.1", relay.port(), key, meshrun::proto::CopyPortRequest::fetch("run", 2, 5)),
        Catch::Contains("refused the request"));
    CHECK(relay.relayed() < 4096);
  }
  // Dialled directly, the same request is served.
  const auto direct = open_peer_request("127.0.0.1", port, key, meshrun::proto::CopyPortRequest::fetch("run", 2, 5));
  CHECK(receive_frame(direct.get())["ok"] == true);
  // The inventories that tell agents where to dial are signed: one written without the secret, or moved under another
  // node's key, is not believed.
  meshrun::proto::Inventory inventory{.node = 1, .host = "node1", .addr = "127.0.0.1", .port = port, .copies = {}};
  const std::string store_key = "meshrun/memory/1/node/1";
  const std::string value = signed_inventory(inventory, store_key, key);
  REQUIRE(verified_inventory(value, store_key, key));
  CHECK(verified_inventory(value, store_key, key)->port == port);
  CHECK_FALSE(verified_inventory(value, "meshrun/memory/1/node/0", key));
  CHECK_FALSE(verified_inventory(value, store_key, std::string(64, '0')));
  CHECK_FALSE(verified_inventory(json(inventory).dump(), store_key, key));  // the unsigned format
  auto forged = json::parse(value);
  forged["inventory"] =
      json(meshrun::proto::Inventory{.node = 1, .host = "evil", .addr = "10.9.9.9", .port = 1, .copies = {}}).dump();
  CHECK_FALSE(verified_inventory(forged.dump(), store_key, key));
}

namespace {

// A request to the agent whose copy port is `agent_port`, sent through `path_port`: a connection that reaches the
// agent over a path that can change bytes (the peer proves the agent's own port, as it does when it dials it).
meshrun::launcher::PeerConnection dial_through(int path_port, int agent_port, const std::string& key,
                                               meshrun::proto::CopyPortRequest request) {
  using namespace meshrun::launcher;
  UniqueFd socket = connect_peer("127.0.0.1", path_port);
  const std::string agent_nonce = receive_frame(socket.get()).at("nonce");
  const std::string target = copy_port_target("127.0.0.1", agent_port);
  request.client_nonce = "00112233445566778899aabbccddeeff";
  request.proof = copy_proof(key, "peer", agent_nonce, request.client_nonce, target, request);
  send_frame(socket.get(), request);
  REQUIRE(receive_frame(socket.get()).contains("proof"));
  return {std::move(socket), copy_data_key(key, agent_nonce, request.client_nonce, target)};
}

}  // namespace

TEST_CASE("copy port: a byte of a copy changed on the network path is caught by its MAC, both ways",
          "[memory][security]") {
  using namespace meshrun::launcher;
  const KeeperWithACopy held;
  const std::string key = held.keeper->copy_key();
  // A fetch of rank 2's copy: whole through a path that changes nothing; refused by the peer when one byte of the
  // copy (well past the frames before it) is flipped.
  const auto fetch = [&](Flip flip) -> std::string {
    const Relay path(held.port, flip);
    const auto peer = dial_through(path.port(), held.port, key, meshrun::proto::CopyPortRequest::fetch("run", 2, 5));
    const json reply = receive_frame(peer.get());
    REQUIRE(reply.value("ok", false));
    const auto bytes = reply.at("bytes").get<uint64_t>();
    MemfdSlot into("test fetched", bytes);
    meshrun::Poly1305 mac(peer.data_key);
    try {
      receive_copy(peer.get(), into.fd(), bytes, mac);
    } catch (const std::exception& e) {
      return e.what();
    }
    return into.check();
  };
  CHECK(fetch({}) == "");
  CHECK_THAT(fetch({Flip::Toward::kPeer, 8192}), Catch::Contains("do not match their MAC"));
  // A push of rank 1's copy: the agent keeps nothing of the changed one, and says why.
  const auto five = copy_image(1, 5, 'x');
  const auto push = [&](Flip flip) {
    const Relay path(held.port, flip);
    const auto peer = dial_through(path.port(), held.port, key, push_request("run", 1, 5));
    REQUIRE(receive_frame(peer.get()).value("go", false));
    send_whole_copy(peer, five->fd());
    return receive_frame(peer.get());
  };
  CHECK_THAT(push({Flip::Toward::kAgent, 8192}).value("error", ""), Catch::Contains("do not match their MAC"));
  CHECK(replicas_of(*held.keeper).empty());
  CHECK(push({}).value("ok", false));
  CHECK(replicas_of(*held.keeper) == std::vector<std::pair<int, int64_t>>{{1, 5}});
}

TEST_CASE("copy port: strangers that connect and say nothing do not hold up a fetch", "[memory][security]") {
  using namespace meshrun::launcher;
  const KeeperWithACopy held;
  // All but one of the port's threads held by connections that never send a request (each closed only at the
  // handshake's deadline, seconds away).
  std::vector<UniqueFd> silent;
  for (int i = 0; i + 1 < PeerServer::kConcurrentConnections; ++i) {
    silent.push_back(connect_peer("127.0.0.1", held.port));
    CHECK(receive_frame(silent.back().get()).contains("nonce"));  // accepted: a thread is on it
  }
  const auto peer = open_peer_request("127.0.0.1", held.port, held.keeper->copy_key(),
                                      meshrun::proto::CopyPortRequest::fetch("run", 2, 5));
  CHECK(receive_frame(peer.get()).value("ok", false));
  // Served while every stranger's connection is still open: none was closed to make room.
  for (const UniqueFd& stranger : silent) {
    char byte = 0;
    CHECK(::recv(stranger.get(), &byte, 1, MSG_DONTWAIT) == -1);
    CHECK(errno == EAGAIN);
  }
}

TEST_CASE("copy port: a push of a rank this node does not back, of another world or model, or too large is refused",
          "[memory][security]") {
  using namespace meshrun::launcher;
  meshrun::testing::TempDir dir;
  const meshrun::testing::DaemonProcess store(DAEMON_BIN, {}, dir.path() + "/daemon.log");
  MemoryKeeper keeper(dir.path() + "/memory.sock", "meshrun-memory test", "run", "host");
  keeper.begin_attempt(round_of(meshrun::parse_endpoint(store.endpoint(), 0), 1, 1));  // backs ranks 0-1
  const Worker own(keeper.socket_path(), 2);
  const int port = open_port(keeper);
  REQUIRE(port > 0);
  const std::string key = keeper.copy_key();
  const auto refused = [&](json request) {
    const auto peer = open_peer_request("127.0.0.1", port, key, std::move(request));
    return receive_frame(peer.get()) == kRefused;
  };
  CHECK(refused(push_request("run", 3, 5)));  // node 1's own rank 3: backed by node 0
  auto other_world = push_request("run", 1, 5);
  other_world["world_size"] = 8;
  CHECK(refused(other_world));
  auto other_model = push_request("run", 1, 5);
  other_model["digest"] = 8;
  CHECK(refused(other_model));
  auto larger = push_request("run", 1, 5);
  larger["bytes"] = 64 * kSlotBytes;  // 64 times this node's own copies: memory a stranger would make it take
  CHECK(refused(larger));
  CHECK(replicas_of(keeper).empty());
  CHECK(keeper.held_bytes() == 2 * kSlotBytes);  // its own two slots, nothing for the refused pushes
}

TEST_CASE("memory handover: a node without the memory to spare refuses the copies and says why", "[memory]") {
  meshrun::testing::TempDir dir;
  const meshrun::launcher::ReadText tight = [](const std::string& path) -> std::optional<std::string> {
    if (path == "/proc/meminfo") return "MemAvailable:      64 kB\n";  // far less than two copies' worth
    return std::nullopt;
  };
  MemoryKeeper keeper(dir.path() + "/memory.sock", "meshrun-memory test", "run", "host", "", tight);
  const UniqueFd fd = connect_handover(keeper.socket_path());
  meshrun::send_packet(fd.get(), json{{"op", "hello"}, {"rank", 0}, {"slot_bytes", kSlotBytes}, {"digest", 7}}.dump());
  const auto reply = meshrun::receive_packet(fd.get(), 5000ms);
  const json message = json::parse(reply.text);
  CHECK(message.at("op") == "refused");
  CHECK_THAT(message.at("reason").get<std::string>(),
             Catch::Contains("to spare (MemAvailable; half is kept for training)"));
  CHECK(reply.fds.empty());
  CHECK(keeper.held_bytes() == 0);  // refused before a page was taken
}

TEST_CASE("memory ring: a new ring's buddy gets the restored step at once, and stale replicas are freed", "[memory]") {
  using namespace meshrun::launcher;
  meshrun::testing::TempDir dir;
  const meshrun::testing::DaemonProcess store(DAEMON_BIN, {}, dir.path() + "/daemon.log");
  const auto endpoint = meshrun::parse_endpoint(store.endpoint(), 0);
  // Both with the run's join token: the replicator proves it, with the run's secret, to the buddy's copy port.
  MemoryKeeper node0(dir.path() + "/node0.sock", "meshrun-memory test", "run", "host0", "token");
  MemoryKeeper node1(dir.path() + "/node1.sock", "meshrun-memory test", "run", "host1", "token");
  // Round 0: node 0 alone holds rank 0's copy of step 5; node 1, in another ring of that round, backs ranks 0-1
  // and holds a replica of rank 1.
  node0.begin_attempt(round_of(endpoint, 0, 0, 1));
  {
    Worker first(node0.socket_path(), 0);
    first.write_copy(5, 'a');
    first.tell({{"op", "commit"}, {"step", 5}});
    wait_for(node0, 0, {5});
  }
  {
    MemoryAttempt other_ring = round_of(endpoint, 0, 1);
    other_ring.world_size = kWorkerWorld;
    node1.begin_attempt(other_ring);
    const Worker asks(node1.socket_path(), 1);  // opens node 1's copy port
    const auto one = copy_image(1, 5, 'z');
    const auto peer =
        open_peer_request("127.0.0.1", open_port(node1), node1.copy_key(), push_request("run", 1, 5, kWorkerWorld));
    REQUIRE(receive_frame(peer.get()).value("go", false));
    send_whole_copy(peer, one->fd());
    REQUIRE(receive_frame(peer.get()).value("ok", false));
  }
  // Round 1: node 1 joined (a spare); node 0's buddy is node 1, which holds nothing of rank 0.
  MemoryAttempt round1 = round_of(endpoint, 1, 0);
  round1.world_size = kWorkerWorld;  // one rank per node
  round1.backed_first = 1;
  round1.backed_count = 1;
  node0.begin_attempt(round1);
  MemoryAttempt as_node1 = round1;
  as_node1.node = 1;
  as_node1.backed_first = 0;
  node1.begin_attempt(as_node1);
  Worker restarted(node0.socket_path(), 0);
  restarted.tell({{"op", "restored"}, {"step", 5}, {"source", "memory"}});
  using Replicas = std::vector<std::pair<int, int64_t>>;
  for (int i = 0; i < 500 && replicas_of(node1) != Replicas{{0, 5}, {1, 5}}; ++i) std::this_thread::sleep_for(10ms);
  CHECK(replicas_of(node1) == Replicas{{0, 5}, {1, 5}});  // before any new copy of this round

  // Node 1's own rank 1 makes step 10 durable: rank 1's replica (an older ring's, older than 10) is freed,
  // rank 0's (this round's) kept.
  Worker rank1(node1.socket_path(), 1);
  rank1.write_copy(10, 'b');
  rank1.tell({{"op", "commit"}, {"step", 10}});
  wait_for(node1, 1, {10});
  rank1.tell({{"op", "durable"}, {"step", 10}});
  for (int i = 0; i < 500 && replicas_of(node1) != Replicas{{0, 5}}; ++i) std::this_thread::sleep_for(10ms);
  CHECK(replicas_of(node1) == Replicas{{0, 5}});
  CHECK(node1.held_bytes() == 2 * kSlotBytes + 2 * kSlotBytes);  // rank 1's own two slots, rank 0's two replicas
}

TEST_CASE(
    "copy port: with a join token only agents that prove it and the run's secret push or fetch, and the agent "
    "proves it back",
    "[memory][security]") {
  using namespace meshrun::launcher;
  meshrun::testing::TempDir dir;
  const meshrun::testing::DaemonProcess store(DAEMON_BIN, {}, dir.path() + "/daemon.log");
  MemoryKeeper guarded(dir.path() + "/guarded.sock", "meshrun-memory test", "run", "host", "token");
  guarded.begin_attempt(round_of(meshrun::parse_endpoint(store.endpoint(), 0), 1, 1));
  const Worker own(guarded.socket_path(), 2);
  const int port = open_port(guarded);
  REQUIRE(port > 0);
  CHECK(guarded.copy_key() == std::string(kSecret) + ":token");
  // The run's secret without the token (an agent started without it), or another token: refused.
  CHECK_THROWS_WITH(open_peer_request("127.0.0.1", port, kSecret, push_request("run", 1, 5)),
                    Catch::Contains("refused the request"));
  CHECK_THROWS_WITH(open_peer_request("127.0.0.1", port, std::string(kSecret) + ":other", push_request("run", 1, 5)),
                    Catch::Contains("refused the request"));
  CHECK(replicas_of(guarded).empty());
  {
    const auto five = copy_image(1, 5, 'x');
    const auto peer = open_peer_request("127.0.0.1", port, guarded.copy_key(), push_request("run", 1, 5));
    REQUIRE(receive_frame(peer.get()).value("go", false));
    send_whole_copy(peer, five->fd());
    CHECK(receive_frame(peer.get()).value("ok", false));
  }
  CHECK(replicas_of(guarded) == std::vector<std::pair<int, int64_t>>{{1, 5}});

  // An agent that cannot prove the key (it answers with a made-up proof) gets no copy and sends none.
  const UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener.get(), 1) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  std::thread impostor([&] {
    const UniqueFd peer(::accept(listener.get(), nullptr, nullptr));
    send_frame(peer.get(), {{"nonce", "0123"}});
    receive_frame(peer.get());
    send_frame(peer.get(), {{"proof", "made-up"}});
  });
  CHECK_THROWS_WITH(open_peer_request("127.0.0.1", ntohs(addr.sin_port), guarded.copy_key(),
                                      meshrun::proto::CopyPortRequest::fetch("run", 1, -1)),
                    Catch::Contains("does not know the run's secret"));
  impostor.join();
}
