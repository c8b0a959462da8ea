// A real PyTorch script under meshrun: init_process_group("gloo", init_method="env://") + all_reduce.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "support/subprocess.hpp"

TEST_CASE("a PyTorch gloo all_reduce works through meshrun's store", "[launch][pytorch]") {
  const std::string venv = VENV_BIN;
  INFO("the PyTorch test needs " << venv << "/python with torch (run scripts/setup.sh)");
  REQUIRE(meshrun::testing::file_exists(venv + "/python"));
  meshrun::testing::TempDir dir;
  const char* path = std::getenv("PATH");
  // .py entrypoints run under `python` from PATH, so the venv goes first.
  auto [code, out] =
      meshrun::testing::run({MESHRUN_BIN, "--standalone", "--nproc-per-node", "3", ALLREDUCE_SCRIPT, dir.path()},
                            {"PATH=" + venv + ":" + (path ? path : "/usr/bin:/bin")}, dir.path() + "/out");
  INFO(out);
  REQUIRE(code == 0);
  // A script without beats and one collective: nothing to time its steps by, and the line says so (never 0.0 %).
  CHECK_THAT(out, Catch::Contains("meshrun: goodput unknown for 00:"));
  CHECK_THAT(out, Catch::Contains("(no step beats, and too few collectives to time it by)"));
  CHECK_THAT(out, !Catch::Contains("goodput 0.0 %"));
  for (int r = 0; r < 3; ++r) {
    // 1 + 2 + 3 = 6 on every rank.
    CHECK(meshrun::testing::read_file(dir.path() + "/rank" + std::to_string(r) + ".txt") ==
          std::to_string(r) + " 3 " + std::to_string(r) + " 6\n");
  }
}
