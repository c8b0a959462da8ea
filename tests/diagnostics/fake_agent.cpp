// fake_agent ENDPOINT RUN_ID HOST NODE_RANK NNODES [KEEP_ALIVE_S]: a stand-in for a meshrun agent. It
// joins the run with the keep-alive timeout given (default 60 s, so a loaded machine never makes it look
// stale), then keeps itself alive (await while the round is open, heartbeat every 0.5 s once ranks are
// assigned) until killed. Tests SIGSTOP one with a short keep-alive to make a stale node.
// Prints "joined <node id>" once joined; exits 3 (printing why) when the daemon refuses the join.
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "common/endpoint.hpp"
#include "common/error.hpp"
#include "proto/rendezvous/rendezvous_client.hpp"

int main(int argc, char** argv) {
  using namespace meshrun;
  if (argc != 6 && argc != 7) {
    std::cerr << "usage: fake_agent ENDPOINT RUN_ID HOST NODE_RANK NNODES [KEEP_ALIVE_S]\n";
    return 2;
  }
  try {
    proto::ConnectOptions options;
    options.connect_timeout = std::chrono::seconds(10);
    options.op_timeout = std::chrono::seconds(10);
    proto::RendezvousClient client(proto::StoreClient::connect(parse_endpoint(argv[1], 29400), options));
    proto::JoinRequest join;
    join.run_id = argv[2];
    join.host = argv[3];
    join.addr = argv[3];
    join.requested_rank = std::stoi(argv[4]);
    join.min_nodes = join.max_nodes = std::stoi(argv[5]);
    join.keep_alive_timeout_s = argc == 7 ? std::stod(argv[6]) : 60.0;
    join.pid = ::getpid();
    const std::string node_id = client.join(join);
    std::cout << "joined " << node_id << std::endl;
    bool assigned = false;
    for (;;) {
      if (!assigned) {
        assigned =
            client.await(join.run_id, node_id, std::chrono::milliseconds(500)).status == proto::AwaitStatus::kAssigned;
      } else {
        client.heartbeat(join.run_id, node_id);
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
      }
    }
  } catch (const RemoteError& e) {
    std::cout << "join failed: " << e.what() << std::endl;
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "fake_agent: " << e.what() << "\n";
    return 1;
  }
}
