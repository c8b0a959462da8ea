#include "tools/nccl_bench/nccl_sweep.hpp"

#include <cctype>
#include <charconv>
#include <cstdio>

#include "common/error.hpp"

namespace meshrun::tools {

uint64_t parse_size(const std::string& text) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  uint64_t scale = 1;
  if (ptr != end && ptr + 1 == end) {
    switch (std::toupper(static_cast<unsigned char>(*ptr))) {
      case 'K': scale = 1ull << 10; break;
      case 'M': scale = 1ull << 20; break;
      case 'G': scale = 1ull << 30; break;
      default: scale = 0;
    }
    ++ptr;
  }
  if (text.empty() || ec != std::errc() || ptr != end || scale == 0 || value > (UINT64_MAX / scale)) {
    throw UsageError("size '" + text + "': expected a number of bytes with an optional K, M or G suffix");
  }
  return value * scale;
}

std::vector<uint64_t> sweep_sizes(const SweepOptions& options, uint64_t element_bytes) {
  if (options.factor < 2) throw UsageError("step factor " + std::to_string(options.factor) + ": must be 2 or more");
  if (options.min_bytes == 0) throw UsageError("minimum size must be at least 1 byte");
  if (options.min_bytes > options.max_bytes) {
    throw UsageError("minimum size " + std::to_string(options.min_bytes) + " is above the maximum " +
                     std::to_string(options.max_bytes));
  }
  std::vector<uint64_t> sizes;
  for (uint64_t s = options.min_bytes; s <= options.max_bytes;) {
    const uint64_t aligned = std::max(element_bytes, s / element_bytes * element_bytes);
    if (sizes.empty() || sizes.back() != aligned) sizes.push_back(aligned);
    if (s > options.max_bytes / static_cast<uint64_t>(options.factor)) break;  // the next step would overflow
    s *= static_cast<uint64_t>(options.factor);
  }
  return sizes;
}

double algbw_gbps(uint64_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0;
}

double allreduce_busbw_gbps(double algbw, int ranks) {
  if (ranks < 2) return 0;
  return algbw * 2.0 * (ranks - 1) / ranks;
}

std::string sweep_header() {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "#%75s%36s\n"
                "#%12s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n"
                "#%12s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n",
                "out-of-place", "in-place", "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
                "#wrong", "time", "algbw", "busbw", "#wrong", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)",
                "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  return buf;
}

std::string format_sweep_row(const SweepRow& row, int ranks, const std::string& type_name) {
  const double oop_alg = algbw_gbps(row.bytes, row.out_of_place_us * 1e-6);
  const double ip_alg = algbw_gbps(row.bytes, row.in_place_us * 1e-6);
  char buf[256];
  // #wrong is N/A: correctness is checked by nccl-tests (-c 1), not here; this tool only times.
  std::snprintf(buf, sizeof buf, " %12llu  %12llu  %8s  %6s  %6d  %7.2f  %6.2f  %6.2f  %6s  %7.2f  %6.2f  %6.2f  %6s\n",
                static_cast<unsigned long long>(row.bytes), static_cast<unsigned long long>(row.count),
                type_name.c_str(), "sum", -1, row.out_of_place_us, oop_alg, allreduce_busbw_gbps(oop_alg, ranks), "N/A",
                row.in_place_us, ip_alg, allreduce_busbw_gbps(ip_alg, ranks), "N/A");
  return buf;
}

std::string sweep_footer(const std::vector<SweepRow>& rows, int ranks) {
  double sum = 0;
  int n = 0;
  for (const auto& r : rows) {
    sum += allreduce_busbw_gbps(algbw_gbps(r.bytes, r.out_of_place_us * 1e-6), ranks);
    sum += allreduce_busbw_gbps(algbw_gbps(r.bytes, r.in_place_us * 1e-6), ranks);
    n += 2;
  }
  char buf[128];
  std::snprintf(buf, sizeof buf, "# Avg bus bandwidth    : %g\n", n > 0 ? sum / n : 0.0);
  return buf;
}

}  // namespace meshrun::tools
