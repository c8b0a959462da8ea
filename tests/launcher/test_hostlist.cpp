// expand_hostlist against hand-written cases and against `scontrol show hostnames` (the reference
// implementation, run with a stub SLURM_CONF so no cluster is needed).
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "launcher/hosts/hostlist.hpp"
#include "support/subprocess.hpp"

using namespace meshrun;
using namespace meshrun::launcher;
using Hosts = std::vector<std::string>;

TEST_CASE("hostlists expand like SLURM's", "[hostlist]") {
  CHECK(expand_hostlist("node1") == Hosts{"node1"});
  CHECK(expand_hostlist("gpu[01-04,07],cpu5") == Hosts{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu5"});
  CHECK(expand_hostlist("x-[1-2]-[1-2]") == Hosts{"x-1-1", "x-1-2", "x-2-1", "x-2-2"});
  CHECK(expand_hostlist("node[008-011]") == Hosts{"node008", "node009", "node010", "node011"});
  CHECK(expand_hostlist("n[9-10]") == Hosts{"n9", "n10"});
  CHECK(expand_hostlist("a[1-2]b[3-4]") == Hosts{"a1b3", "a1b4", "a2b3", "a2b4"});
  CHECK(expand_hostlist("n[1],m,") == Hosts{"n1", "m"});
  CHECK(expand_hostlist("").empty());
}

TEST_CASE("malformed hostlists are errors that quote the list", "[hostlist]") {
  for (const std::string bad : {"n[1-3", "n1-3]", "n[3-1]", "n[a-b]", "n[1-]", "n[[1]]", "n[0-99999999]"}) {
    DYNAMIC_SECTION(bad) {
      try {
        expand_hostlist(bad);
        FAIL("no error for " << bad);
      } catch (const UsageError& e) {
        CHECK_THAT(e.what(), Catch::Contains("'" + bad + "'"));
      }
    }
  }
}

TEST_CASE("hostlists expand exactly as scontrol show hostnames does", "[hostlist][oracle]") {
  // scontrol needs a config, not a cluster: two lines are enough (it would try DNS SRV records otherwise).
  meshrun::testing::TempDir dir;
  const std::string conf = dir.path() + "/slurm.conf";
  std::ofstream(conf) << "ClusterName=x\nSlurmctldHost=localhost\n";
  const std::vector<std::string> cases = {
      "n[01-03,7]",       "node[008-011]",         "x-[1-2]-[1-2]", "a[1-2]b[3-4]", "gpu[01-04,07],cpu5",
      "n1,n2,n10,m5,n03", "rack[1-2]-node[01-03]", "n[0-2,5-6,9]",  "single"};
  for (const auto& list : cases) {
    DYNAMIC_SECTION(list) {
      const std::string cmd = "SLURM_CONF=" + conf + " scontrol show hostnames '" + list + "' 2>&1";
      FILE* p = ::popen(cmd.c_str(), "r");
      REQUIRE(p != nullptr);
      std::string out;
      char buf[4096];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
      const int rc = ::pclose(p);
      INFO("scontrol output: " << out << " (install slurm-client: scripts/setup.sh)");
      REQUIRE(rc == 0);
      REQUIRE(out.find("rror") == std::string::npos);  // scontrol exits 0 even for "Invalid hostlist"
      Hosts expected;
      std::istringstream in(out);
      for (std::string h; in >> h;) expected.push_back(h);
      CHECK(expand_hostlist(list) == expected);
    }
  }
}
