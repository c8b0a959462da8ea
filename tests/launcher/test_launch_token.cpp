// The join token end to end: the hosting agent's daemon requires the token it was started with; a node
// without it (or with another) is refused with a clear error and takes no rank; the token reaches neither
// the output nor the workers.
#include <catch2/catch.hpp>
#include <csignal>

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
