// The join token end to end, and the hosting agent's --host and --allow: the hosting agent's daemon requires the token
// it was started with; a node without it (or with another) is refused with a clear error and takes no rank; the token
// reaches neither the output nor the workers.
#include <catch2/catch.hpp>
#include <csignal>
#include <fstream>
#include <sstream>

#include "support/subprocess.hpp"

using meshrun::testing::Process;
using meshrun::testing::read_file;
using meshrun::testing::TempDir;
using meshrun::testing::wait_for_hosted_endpoint;

namespace {

const std::string kToken = "tok-9f3a61c2e7";

std::vector<std::string> token_agent(const std::string& endpoint, bool is_host, const std::string& dir) {
  return {MESHRUN_BIN,
          "--nnodes",
          "2",
          "--nproc-per-node",
          "1",
          "--rdzv-backend",
          "c10d",
          "--rdzv-endpoint",
          endpoint,
          "--rdzv-id",
          "tok",
          "--rdzv-conf",
          std::string("is_host=") + (is_host ? "1" : "0") + ",join_timeout=30",
          TEST_WORKER_BIN,
          "env",
          dir};
}

}  // namespace

TEST_CASE("a join token admits the nodes that know it and refuses the others", "[launch][token]") {
  TempDir dir;
  Process host(token_agent("127.0.0.1:0", true, dir.path()), {std::string("MESHRUN_RDZV_TOKEN=") + kToken},
               dir.path() + "/host.out");
  const std::string endpoint = wait_for_hosted_endpoint(host);
  REQUIRE(!endpoint.empty());
  // Without the token, and with a wrong one: refused at once with what to set, never a rank.
  auto [none_code, none_out] =
      meshrun::testing::run(token_agent(endpoint, false, dir.path()), {"MESHRUN_RDZV_TOKEN"}, dir.path() + "/none.out");
  INFO(none_out);
  CHECK(none_code != 0);
  CHECK_THAT(none_out, Catch::Contains("requires a join token") && Catch::Contains("MESHRUN_RDZV_TOKEN"));
  auto [wrong_code, wrong_out] = meshrun::testing::run(token_agent(endpoint, false, dir.path()),
                                                       {"MESHRUN_RDZV_TOKEN=not-it"}, dir.path() + "/wrong.out");
  INFO(wrong_out);
  CHECK(wrong_code != 0);
  CHECK_THAT(wrong_out, Catch::Contains("does not match"));
  CHECK_FALSE(meshrun::testing::file_exists(dir.path() + "/env.0"));  // nobody started: the round never closed
  // With the token (here from --rdzv-conf): the job runs.
  auto args = token_agent(endpoint, false, dir.path());
  args[12] += ",token=" + kToken;
  auto [code, out] = meshrun::testing::run(args, {"MESHRUN_RDZV_TOKEN"}, dir.path() + "/good.out");
  INFO(out);
  CHECK(code == 0);
  CHECK(host.wait() == 0);
  const std::string host_out = host.output();
  for (int r = 0; r < 2; ++r) {
    const std::string env = read_file(dir.path() + "/env." + std::to_string(r));
    CHECK_THAT(env, Catch::Contains("WORLD_SIZE=2"));
    CHECK_THAT(env, !Catch::Contains("MESHRUN_RDZV_TOKEN"));  // the workers never see it
  }
  for (const auto& text : {host_out, none_out, wrong_out, out}) CHECK_THAT(text, !Catch::Contains(kToken));
}

namespace {

// The IPv4 address a socket listening on `port` is bound to, from /proc/net/tcp ("0.0.0.0", "127.0.0.1"), or "".
std::string listening_address(int port) {
  std::ifstream table("/proc/net/tcp");
  std::string line;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    const auto colon = local.find(':');
    if (state != "0A" || colon == std::string::npos || std::stoi(local.substr(colon + 1), nullptr, 16) != port)
      continue;
    const uint32_t raw = static_cast<uint32_t>(std::stoul(local.substr(0, colon), nullptr, 16));  // little-endian
    return std::to_string(raw & 255) + "." + std::to_string((raw >> 8) & 255) + "." +
           std::to_string((raw >> 16) & 255) + "." + std::to_string(raw >> 24);
  }
  return "";
}

}  // namespace

TEST_CASE("the hosting agent's rendezvous listens on --host and accepts only --allow's peers", "[launch][allow]") {
  TempDir dir;
  auto narrowed = token_agent("127.0.0.1:0", true, dir.path());
  narrowed.insert(narrowed.begin() + 1, {"--host", "127.0.0.1", "--allow", "127.0.0.0/8"});
  Process host(narrowed, {"MESHRUN_RDZV_TOKEN"}, dir.path() + "/host.out");
  const std::string endpoint = wait_for_hosted_endpoint(host);
  REQUIRE(!endpoint.empty());
  CHECK(listening_address(std::stoi(endpoint.substr(endpoint.rfind(':') + 1))) == "127.0.0.1");  // not every address
  auto [code, out] =
      meshrun::testing::run(token_agent(endpoint, false, dir.path()), {"MESHRUN_RDZV_TOKEN"}, dir.path() + "/peer.out");
  INFO(out);
  CHECK(code == 0);
  CHECK(host.wait() == 0);
  // Peers outside --allow are refused with a readable answer: here the hosting agent's own join, from 127.0.0.1.
  auto closed = token_agent("127.0.0.1:0", true, dir.path());
  closed.insert(closed.begin() + 1, {"--allow", "10.0.0.0/8"});
  auto [refused_code, refused_out] = meshrun::testing::run(closed, {"MESHRUN_RDZV_TOKEN"}, dir.path() + "/refused.out");
  INFO(refused_out);
  CHECK(refused_code != 0);
  CHECK_THAT(refused_out, Catch::Contains("not allowed"));
}
