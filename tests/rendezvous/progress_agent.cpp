// progress_agent ENDPOINT RUN_ID HOST RANKS [--hung-rank R] [--slow-rank R] [--late-rank R] [--restart-hung]: a
// stand-in for a meshrun agent whose workers beat, for the HTTP live view tests. It joins RUN_ID as the only node with
// RANKS local ranks and then heartbeats every 0.2 s with their progress, as a real agent does: every rank advances a
// step per 0.1 s with a falling loss, except that --hung-rank stays at step 5 flagged hung (its beat age growing) and
// --slow-rank reports three times the compute time (the daemon names it a straggler); --late-rank is flagged late (busy
// while the others wait for it) with a late line. --restart-hung first reports a hung worker (its failure record, then
// cause "hung") and re-joins, so the run shows one restart and its root cause. Prints "beating" once the daemon has its
// progress; runs until killed.
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "common/endpoint.hpp"
#include "proto/rendezvous/rendezvous_client.hpp"

namespace {

using namespace meshrun;

struct Args {
  std::string endpoint, run_id, host;
  int ranks = 1;
  int hung_rank = -1;
  int slow_rank = -1;
  int late_rank = -1;
  bool restart_hung = false;
};

// Joins and awaits the round; returns the node id.
std::string join_round(proto::RendezvousClient& client, const proto::JoinRequest& join) {
  const std::string node_id = client.join(join);
  while (client.await(join.run_id, node_id, std::chrono::milliseconds(500)).status != proto::AwaitStatus::kAssigned) {}
  return node_id;
}

std::vector<proto::RankProgress> progress(const Args& a, int64_t step, double hung_for_s) {
  std::vector<proto::RankProgress> out;
  for (int rank = 0; rank < a.ranks; ++rank) {
    proto::RankProgress p;
    p.rank = rank;
    p.phase = "train";
    p.hung = rank == a.hung_rank;
    p.step = p.hung ? 5 : step;
    p.since_beat_s = p.hung ? hung_for_s : 0.05;
    p.step_time_s = 0.3;
    p.compute_s = rank == a.slow_rank ? 0.3 : 0.1;
    p.loss = 4.0 / (1.0 + 0.05 * static_cast<double>(p.step));
    p.tokens_per_s = rank == a.slow_rank ? 400 : 1200;
    p.late = rank == a.late_rank;
    if (p.late) {
      p.late_reason = "rank " + std::to_string(rank) + " (" + a.host +
                      ") is late: it has not entered barrier #10 of group 0 (ranks 0-" + std::to_string(a.ranks - 1) +
                      ") for 61 s; it is busy (0.97 CPU, writing 19.8 MB/s) in save at train.py:14";
    }
    out.push_back(p);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::cerr << "usage: progress_agent ENDPOINT RUN_ID HOST RANKS [--hung-rank R] [--slow-rank R] [--late-rank R] "
                 "[--restart-hung]\n";
    return 2;
  }
  Args a{argv[1], argv[2], argv[3], std::stoi(argv[4])};
  for (int i = 5; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--restart-hung") {
      a.restart_hung = true;
    } else if (flag == "--hung-rank" && i + 1 < argc) {
      a.hung_rank = std::stoi(argv[++i]);
    } else if (flag == "--slow-rank" && i + 1 < argc) {
      a.slow_rank = std::stoi(argv[++i]);
    } else if (flag == "--late-rank" && i + 1 < argc) {
      a.late_rank = std::stoi(argv[++i]);
    } else {
      std::cerr << "progress_agent: unknown argument '" << flag << "'\n";
      return 2;
    }
  }
  try {
    proto::ConnectOptions options;
    options.connect_timeout = std::chrono::seconds(10);
    options.op_timeout = std::chrono::seconds(10);
    proto::RendezvousClient client(proto::StoreClient::connect(parse_endpoint(a.endpoint, 29400), options));
    proto::JoinRequest join;
    join.run_id = a.run_id;
    join.host = join.addr = a.host;
    join.local_world_size = a.ranks;
    join.last_call_timeout_s = 0;
    join.keep_alive_timeout_s = 60;  // a loaded test machine never makes it look dead
    join.pid = ::getpid();
    std::string node_id = join_round(client, join);
    if (a.restart_hung) {
      proto::FailureReport hung;
      hung.round = 0;
      hung.rank = a.hung_rank;
      hung.host = a.host;
      hung.cause = proto::RestartCause::kHung;
      hung.exit = "hung: no progress beat for 9.0 s (budget 8.0 s) after step 5 (train)";
      hung.traceback = {"    block_forever (progress_agent.py:30)", "    main (progress_agent.py:64)"};
      client.record_failure(a.run_id, node_id, hung);
      client.report_failure(a.run_id, node_id, "rank " + std::to_string(a.hung_rank) + " hung (progress_agent)",
                            proto::RestartCause::kHung);
      node_id = join_round(client, join);
    }
    const auto start = std::chrono::steady_clock::now();
    for (bool announced = false;; announced = true) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      // A node clock 2.5 ms ahead of the daemon's, known to 0.3 ms (the page shows it).
      client.heartbeat(a.run_id, node_id, progress(a, 1 + static_cast<int64_t>(elapsed / 0.1), elapsed), std::nullopt,
                       proto::ClockReading{.measured = true, .offset_s = 0.0025, .uncertainty_s = 0.0003});
      if (!announced) std::cout << "beating " << node_id << std::endl;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  } catch (const std::exception& e) {
    std::cerr << "progress_agent: " << e.what() << "\n";
    return 1;
  }
}
