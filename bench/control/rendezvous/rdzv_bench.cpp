// rdzv_bench: N simulated agents (one thread and connection each) join one run of N nodes on a running
// daemon; prints the time from the first join until every agent holds its rank, and checks that the
// ranks are 0..N-1 exactly once. Connections and threads are set up before the clock starts: every
// thread sleeps on one flag until all are ready (thousands of threads spinning would starve the daemon).
//
//   rdzv_bench HOST:PORT AGENTS
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common/endpoint.hpp"
#include "proto/rendezvous/rendezvous_client.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: rdzv_bench HOST:PORT AGENTS\n");
    return 2;
  }
  using namespace meshrun;
  const auto ep = parse_endpoint(argv[1], 29400);
  const int agents = std::stoi(argv[2]);
  const std::string run_id = "bench-" + std::to_string(::getpid()) + "-" + argv[2];
  // Connect everyone first: the measurement is the rendezvous, not TCP set-up.
  std::vector<proto::RendezvousClient> clients;
  proto::ConnectOptions options;
  options.op_timeout = std::chrono::seconds(120);
  for (int i = 0; i < agents; ++i) clients.emplace_back(proto::StoreClient::connect(ep, options));
  std::vector<int> ranks(static_cast<size_t>(agents), -1);
  std::vector<double> done_at(static_cast<size_t>(agents), 0);
  std::atomic<bool> go{false};
  std::atomic<int> ready{0};
  std::chrono::steady_clock::time_point start;
  std::vector<std::thread> threads;
  for (int i = 0; i < agents; ++i) {
    threads.emplace_back([&, i] {
      ready.fetch_add(1);
      go.wait(false);
      proto::JoinRequest r;
      r.run_id = run_id;
      r.host = "sim-" + std::to_string(i);
      r.addr = "127.0.0.1";
      r.local_world_size = 8;
      r.min_nodes = agents;
      r.max_nodes = agents;
      r.pid = i;
      auto& c = clients[static_cast<size_t>(i)];
      const auto id = c.join(r);
      for (;;) {
        const auto reply = c.await(run_id, id, std::chrono::seconds(30));
        if (reply.status == proto::AwaitStatus::kAssigned) {
          ranks[static_cast<size_t>(i)] = reply.assignment.group_rank;
          break;
        }
        if (reply.status == proto::AwaitStatus::kFailed) break;
      }
      done_at[static_cast<size_t>(i)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
  }
  while (ready.load() < agents) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  start = std::chrono::steady_clock::now();
  go = true;
  go.notify_all();
  for (auto& t : threads) t.join();
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  bool ok = true;
  for (int i = 0; i < agents; ++i) ok = ok && sorted[static_cast<size_t>(i)] == i;
  std::printf("%d %.4f %s\n", agents, *std::max_element(done_at.begin(), done_at.end()), ok ? "ok" : "BAD-RANKS");
  return ok ? 0 : 1;
}
