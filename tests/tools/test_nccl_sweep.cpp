// The GPU-free parts of meshrun-nccl-bench: size parsing, the sweep, algbw/busbw and the table.
#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "tools/nccl_bench/nccl_sweep.hpp"

using namespace meshrun;
using namespace meshrun::tools;

TEST_CASE("sizes parse with K, M and G suffixes", "[nccl][sweep]") {
  CHECK(parse_size("8") == 8);
  CHECK(parse_size("64K") == 64 * 1024);
  CHECK(parse_size("256M") == 256ull << 20);
  CHECK(parse_size("1g") == 1ull << 30);
  CHECK_THROWS_AS(parse_size(""), UsageError);
  CHECK_THROWS_AS(parse_size("12X"), UsageError);
  CHECK_THROWS_AS(parse_size("M"), UsageError);
  CHECK_THROWS_AS(parse_size("-8"), UsageError);
  CHECK_THROWS_AS(parse_size("99999999999999G"), UsageError);
}

TEST_CASE("the sweep multiplies by the factor and keeps whole elements", "[nccl][sweep]") {
  SweepOptions o;
  o.min_bytes = 8;
  o.max_bytes = 256ull << 20;
  o.factor = 2;
  const auto sizes = sweep_sizes(o, 4);
  REQUIRE(sizes.size() == 26);  // 2^3 .. 2^28
  CHECK(sizes.front() == 8);
  CHECK(sizes[1] == 16);
  CHECK(sizes.back() == 256ull << 20);
  o.factor = 4;
  CHECK(sweep_sizes(o, 4).size() == 13);  // 2^3, 2^5, ..., 2^27
  CHECK(sweep_sizes(o, 4).back() == 128ull << 20);
  // Sizes below one element become one element; duplicates collapse.
  o.min_bytes = 1;
  o.max_bytes = 8;
  o.factor = 2;
  CHECK(sweep_sizes(o, 4) == std::vector<uint64_t>{4, 8});
  o.factor = 1;
  CHECK_THROWS_AS(sweep_sizes(o, 4), UsageError);
  o.factor = 2;
  o.min_bytes = 16;
  CHECK_THROWS_AS(sweep_sizes(o, 4), UsageError);
  // No overflow near the top of the range.
  o.min_bytes = 1ull << 62;
  o.max_bytes = UINT64_MAX;
  CHECK(sweep_sizes(o, 4).size() == 2);
}

TEST_CASE("busbw is algbw times 2(n-1)/n", "[nccl][sweep]") {
  CHECK(algbw_gbps(1'000'000'000, 1.0) == Approx(1.0));
  CHECK(algbw_gbps(500'000'000, 0.25) == Approx(2.0));
  CHECK(algbw_gbps(8, 0) == 0);
  CHECK(allreduce_busbw_gbps(10.0, 1) == 0);
  CHECK(allreduce_busbw_gbps(10.0, 2) == Approx(10.0));
  CHECK(allreduce_busbw_gbps(10.0, 4) == Approx(15.0));
  CHECK(allreduce_busbw_gbps(10.0, 8) == Approx(17.5));
}

TEST_CASE("rows and footer follow nccl-tests' layout", "[nccl][sweep]") {
  SweepRow row;
  row.bytes = 1 << 20;
  row.count = (1 << 20) / 4;
  row.out_of_place_us = 104.8576;  // 10 GB/s algbw
  row.in_place_us = 209.7152;      // 5 GB/s
  const std::string line = format_sweep_row(row, 4, "float");
  INFO(line);
  CHECK(line ==
        "      1048576        262144     float     sum      -1   104.86   10.00   15.00     N/A   209.72    5.00    "
        "7.50     N/A\n");
  const std::string header = sweep_header();
  CHECK(header.find("out-of-place") != std::string::npos);
  CHECK(header.find("busbw") != std::string::npos);
  CHECK(header.find("(elements)") != std::string::npos);
  CHECK(sweep_footer({row}, 4) == "# Avg bus bandwidth    : 11.25\n");
  CHECK(sweep_footer({}, 4) == "# Avg bus bandwidth    : 0\n");
}
