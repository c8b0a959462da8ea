// The cross-memory-attach transport between real processes: this test process is rank 0, forked children
// are the other ranks. Contents of every copy, completion in different orders on different ranks, more
// collectives in flight than the control block has slots, and the failures: a peer that exits, a peer that
// never posts, ranks that disagree on a size, a rank that may not read its peers' memory.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/support/skip.hpp"
#include "trainer/distributed/cma_transport.hpp"

using meshrun::trainer::CmaSegmentFile;
using meshrun::trainer::CmaTransport;
using meshrun::trainer::CmaUnavailable;
using namespace std::chrono_literals;

namespace {

// Rank r of `size` on the control block at `path`, connected.
std::unique_ptr<CmaTransport> join(const std::string& path, int rank, int size, std::chrono::milliseconds timeout) {
  auto t = std::make_unique<CmaTransport>(path, rank, size, timeout);
  t->connect();
  return t;
}

// Forks ranks 1..size-1, each running `body` (a failure exits non-zero and prints why); returns their pids.
std::vector<pid_t> fork_peers(int size, const std::function<void(int rank)>& body) {
  std::vector<pid_t> pids;
  std::fflush(nullptr);  // or the children flush the test runner's buffered output a second time
  for (int rank = 1; rank < size; ++rank) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int code = 0;
      try {
        body(rank);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        code = 1;
      }
      std::fflush(nullptr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  return pids;
}

int exit_code_of(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Rank r's input of collective c: distinct values everywhere, so a copy from the wrong place shows.
std::vector<float> input_of(int rank, int collective, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(rank * 1000003 + collective * 7919 + static_cast<int>(i));
  return v;
}

// Posts `collectives` all-gather-like exchanges of n floats (every rank reads every peer's whole input),
// completes them in `order`, and checks every byte. Returns the number of wrong floats.
size_t exchange(CmaTransport& t, int collectives, size_t n, const std::vector<int>& order) {
  std::vector<std::vector<float>> inputs;
  std::vector<std::vector<float>> gathered;
  std::vector<uint64_t> seqs;
  for (int c = 0; c < collectives; ++c) {
    inputs.push_back(input_of(t.rank(), c, n));
    gathered.emplace_back(n * static_cast<size_t>(t.size()), -1.0f);
    seqs.push_back(t.post(inputs.back().data(), n * sizeof(float)));
    for (int peer = 0; peer < t.size(); ++peer) {
      if (peer != t.rank()) t.expect(seqs.back(), peer, 0, gathered.back().data() + peer * n, n * sizeof(float));
    }
  }
  for (int c : order) t.complete(seqs[static_cast<size_t>(c)]);
  size_t wrong = 0;
  for (int c = 0; c < collectives; ++c) {
    for (int peer = 0; peer < t.size(); ++peer) {
      if (peer == t.rank()) continue;
      const auto expected = input_of(peer, c, n);
      for (size_t i = 0; i < n; ++i) wrong += gathered[static_cast<size_t>(c)][peer * n + i] != expected[i];
    }
  }
  return wrong;
}

// Rank 0's side of a one-float exchange with rank 1: the collective the failure tests wait on.
struct OneFloat {
  explicit OneFloat(CmaTransport& t) : seq(t.post(&mine, sizeof mine)) { t.expect(seq, 1, 0, &theirs, sizeof theirs); }
  float mine = 1.0f;
  float theirs = 0.0f;
  uint64_t seq;
};

}  // namespace

TEST_CASE("cma: three ranks read every peer's input, completing in different orders", "[trainer][cma]") {
  const CmaSegmentFile segment(3);
  // 3 MB per input: many pages, and more than one process_vm_readv may move at once on some kernels.
  const size_t n = 3 * 1024 * 1024 / sizeof(float) + 5;
  // Rank 0 completes in issue order, rank 1 backwards, rank 2 from the middle out: none may wait forever.
  const std::vector<std::vector<int>> orders = {{0, 1, 2, 3}, {3, 2, 1, 0}, {2, 0, 3, 1}};
  auto pids = fork_peers(3, [&](int rank) {
    auto t = join(segment.path(), rank, 3, 60s);
    const size_t wrong = exchange(*t, 4, n, orders[static_cast<size_t>(rank)]);
    if (wrong != 0) throw std::runtime_error(std::to_string(wrong) + " floats wrong");
  });
  auto t = join(segment.path(), 0, 3, 60s);
  CHECK(exchange(*t, 4, n, orders[0]) == 0);
  for (pid_t pid : pids) CHECK(exit_code_of(pid) == 0);
}

TEST_CASE("cma: more collectives in flight than the control block has slots", "[trainer][cma]") {
  const CmaSegmentFile segment(2);
  std::vector<int> order(200);
  for (int c = 0; c < 200; ++c) order[static_cast<size_t>(c)] = c;
  auto pids = fork_peers(2, [&](int rank) {
    auto t = join(segment.path(), rank, 2, 60s);
    if (exchange(*t, 200, 33, order) != 0) throw std::runtime_error("wrong floats");
  });
  auto t = join(segment.path(), 0, 2, 60s);
  CHECK(exchange(*t, 200, 33, order) == 0);
  CHECK(exit_code_of(pids[0]) == 0);
}

TEST_CASE("cma: a reduce-scatter's chunks come from the right offsets", "[trainer][cma]") {
  // Each rank reads its own chunk (offset rank * chunk) of every peer's input.
  const CmaSegmentFile segment(2);
  const size_t chunk = 1000;
  auto run = [&](int rank) {
    auto t = join(segment.path(), rank, 2, 60s);
    const auto in = input_of(rank, 0, 2 * chunk);
    std::vector<float> got(chunk, -1.0f);
    const uint64_t seq = t->post(in.data(), in.size() * sizeof(float));
    t->expect(seq, 1 - rank, rank * chunk * sizeof(float), got.data(), chunk * sizeof(float));
    t->complete(seq);
    const auto theirs = input_of(1 - rank, 0, 2 * chunk);
    return std::equal(got.begin(), got.end(), theirs.begin() + static_cast<std::ptrdiff_t>(rank * chunk));
  };
  auto pids = fork_peers(2, [&](int rank) {
    if (!run(rank)) throw std::runtime_error("wrong chunk");
  });
  CHECK(run(0));
  CHECK(exit_code_of(pids[0]) == 0);
}

TEST_CASE("cma: a peer that exits is named instead of waited for", "[trainer][cma]") {
  const CmaSegmentFile segment(2);
  auto pids = fork_peers(2, [&](int rank) { auto t = join(segment.path(), rank, 2, 60s); });  // joins, then exits
  auto t = join(segment.path(), 0, 2, 60s);
  OneFloat one(*t);
  const uint64_t seq = one.seq;
  // The child stays a zombie until waitpid below: the transport must see that it is gone all the same.
  CHECK_THROWS_AS(t->complete(seq), meshrun::NetworkError);
  CHECK_THROWS_WITH(t->complete(seq), Catch::Contains("rank 1 of this node") && Catch::Contains("exited"));
  CHECK(exit_code_of(pids[0]) == 0);
}

TEST_CASE("cma: a peer that never posts ends in a timeout that names it", "[trainer][cma]") {
  const CmaSegmentFile segment(2);
  auto pids = fork_peers(2, [&](int rank) {
    auto t = join(segment.path(), rank, 2, 60s);
    pause();  // alive, silent: until the test kills it
  });
  auto t = join(segment.path(), 0, 2, 300ms);
  OneFloat one(*t);
  const uint64_t seq = one.seq;
  CHECK_THROWS_AS(t->complete(seq), meshrun::TimeoutError);
  CHECK_THROWS_WITH(t->complete(seq), Catch::Contains("rank(s) 1 to post"));
  kill(pids[0], SIGKILL);
  CHECK(exit_code_of(pids[0]) == 128 + SIGKILL);
}

TEST_CASE("cma: ranks that disagree on a collective's size are named", "[trainer][cma]") {
  const CmaSegmentFile segment(2);
  auto pids = fork_peers(2, [&](int rank) {
    auto t = join(segment.path(), rank, 2, 60s);
    std::vector<float> in(25, 1.0f);  // 100 bytes
    t->post(in.data(), 100);
    pause();
  });
  auto t = join(segment.path(), 0, 2, 60s);
  std::vector<float> in(50, 1.0f);
  std::vector<float> out(50);
  const uint64_t seq = t->post(in.data(), 200);
  t->expect(seq, 1, 0, out.data(), 200);
  CHECK_THROWS_WITH(t->complete(seq),
                    Catch::Contains("rank 0 expects 200 bytes of rank 1's input") && Catch::Contains("which has 100"));
  kill(pids[0], SIGKILL);
  exit_code_of(pids[0]);
}

TEST_CASE("cma: a rank that abandons a collective is named by the peer still waiting for it", "[trainer][cma]") {
  const CmaSegmentFile segment(2);
  int retracted[2];  // rank 1 says when its post is retracted, so that rank 0 cannot read it before
  REQUIRE(pipe(retracted) == 0);
  auto pids = fork_peers(2, [&](int rank) {
    auto t = join(segment.path(), rank, 2, 60s);
    float mine = 1.0f;
    t->cancel(t->post(&mine, sizeof mine));  // an error path dropped the collective: its input goes away
    if (write(retracted[1], "x", 1) != 1) throw std::runtime_error("cannot signal the test");
    pause();
  });
  auto t = join(segment.path(), 0, 2, 60s);
  char byte = 0;
  REQUIRE(read(retracted[0], &byte, 1) == 1);
  close(retracted[0]);
  close(retracted[1]);
  OneFloat one(*t);
  const uint64_t seq = one.seq;
  CHECK_THROWS_WITH(t->complete(seq), Catch::Contains("rank 1 abandoned collective 1"));
  kill(pids[0], SIGKILL);
  exit_code_of(pids[0]);
}

TEST_CASE("cma: when one rank may not read its peers, every rank gets the same refusal", "[trainer][cma]") {
  if (geteuid() != 0) MESHRUN_SKIP_OR_FAIL("needs root to start a rank as another user");
  const CmaSegmentFile segment(2);
  auto pids = fork_peers(2, [&](int rank) {
    // Rank 1 maps the block as root, then becomes nobody: it may not read root's memory, so its probe fails.
    CmaTransport t(segment.path(), rank, 2, 60s);
    if (setgid(65534) != 0 || setuid(65534) != 0) throw std::runtime_error("cannot become nobody");
    try {
      t.connect();
    } catch (const CmaUnavailable& e) {
      if (std::string(e.what()).find("rank 1 cannot read rank 0") != std::string::npos) _exit(42);
      throw;
    }
  });
  CmaTransport t(segment.path(), 0, 2, 60s);
  CHECK_THROWS_WITH(t.connect(),
                    Catch::Contains("rank 1 cannot read rank 0's memory") && Catch::Contains("system.intra_node=gloo"));
  CHECK(exit_code_of(pids[0]) == 42);
}

TEST_CASE("cma: a control block the store names is mapped only when it is a meshrun-cma memfd", "[trainer][cma]") {
  // The path comes from the job's store, which anyone who reaches it may write: a file it names must be refused
  // and left as it was, never opened read-write and overwritten with counters.
  char file_path[] = "/tmp/meshrun-cma-test-XXXXXX";
  const int file = mkstemp(file_path);
  REQUIRE(file >= 0);
  const std::string content(8192, 'x');
  REQUIRE(write(file, content.data(), content.size()) == static_cast<ssize_t>(content.size()));
  const std::string via_proc = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(file);
  const int other_memfd = memfd_create("not-meshrun", MFD_CLOEXEC);
  REQUIRE(other_memfd >= 0);
  REQUIRE(ftruncate(other_memfd, 1 << 20) == 0);
  const int small = memfd_create("meshrun-cma", MFD_CLOEXEC);  // the right name, too small for a group of 2
  REQUIRE(small >= 0);
  for (const std::string& path :
       {std::string(file_path), via_proc, "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(other_memfd),
        "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(small), std::string("/proc/self/fd/0"),
        std::string("/proc/1/fd/x")}) {
    INFO(path);
    CHECK_THROWS_AS(CmaTransport(path, 0, 2, 1s), CmaUnavailable);
    CHECK_THROWS_WITH(CmaTransport(path, 0, 2, 1s), Catch::Contains("refuses the intra-node control block"));
  }
  std::string after(content.size(), '\0');
  REQUIRE(pread(file, after.data(), after.size(), 0) == static_cast<ssize_t>(after.size()));
  CHECK(after == content);  // untouched
  // What group rank 0 really hands out is taken.
  const CmaSegmentFile segment(2);
  CHECK_NOTHROW(CmaTransport(segment.path(), 0, 2, 1s));
  close(file);
  close(other_memfd);
  close(small);
  unlink(file_path);
}
