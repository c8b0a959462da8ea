// store_bench: C clients (threads, one connection each) run set/get/add against a TCPStore-protocol
// server for a fixed time; prints ops/s and p50/p99 latency per operation. The same program measures
// meshrun-rendezvous and PyTorch's own TCPStore server, so the comparison is like for like.
//
//   store_bench HOST:PORT CLIENTS SECONDS_PER_OP
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common/endpoint.hpp"
#include "proto/store/store_client.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Result {
  double ops_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
};

template <typename Op>
Result measure(const meshrun::Endpoint& ep, int clients, double seconds, Op op) {
  std::vector<meshrun::proto::StoreClient> conns;
  for (int i = 0; i < clients; ++i) conns.push_back(meshrun::proto::StoreClient::connect(ep));
  std::vector<std::vector<double>> latencies(static_cast<size_t>(clients));
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  const auto duration = std::chrono::duration<double>(seconds);
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      auto& lat = latencies[static_cast<size_t>(i)];
      auto& conn = conns[static_cast<size_t>(i)];
      const std::string key = "/bench/" + std::to_string(i);
      conn.set(key, "0");  // so get never waits
      while (!go) std::this_thread::yield();
      const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(duration);
      uint64_t n = 0;
      for (auto t0 = Clock::now(); t0 < end; ++n) {
        op(conn, key, n);
        const auto t1 = Clock::now();
        lat.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        t0 = t1;
      }
    });
  }
  go = true;
  for (auto& t : threads) t.join();
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  Result r;
  r.ops_per_s = static_cast<double>(all.size()) / seconds;
  if (!all.empty()) {
    r.p50_us = all[all.size() / 2];
    r.p99_us = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: store_bench HOST:PORT CLIENTS SECONDS_PER_OP\n");
    return 2;
  }
  const auto ep = meshrun::parse_endpoint(argv[1], 29400);
  const int clients = std::stoi(argv[2]);
  const double seconds = std::stod(argv[3]);
  const std::string value(64, 'v');
  const auto set = measure(ep, clients, seconds, [&](auto& c, const std::string& k, uint64_t) {
    c.set(k, value);
    c.ping(1);
  });
  const auto get = measure(ep, clients, seconds, [](auto& c, const std::string& k, uint64_t) { c.get(k); });
  const auto add =
      measure(ep, clients, seconds, [](auto& c, const std::string&, uint64_t) { c.add("/bench/counter", 1); });
  // One line per op: op ops/s p50 p99 (set is followed by a ping because SET has no reply: the pair is
  // one synchronous round trip, as c10d's set-then-wait patterns are).
  std::printf("set %.0f %.1f %.1f\n", set.ops_per_s, set.p50_us, set.p99_us);
  std::printf("get %.0f %.1f %.1f\n", get.ops_per_s, get.p50_us, get.p99_us);
  std::printf("add %.0f %.1f %.1f\n", add.ops_per_s, add.p50_us, add.p99_us);
  return 0;
}
