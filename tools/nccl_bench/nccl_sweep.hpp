// The CPU-side arithmetic and layout of `meshrun-nccl-bench` (an all-reduce bus-bandwidth sweep in the
// style of nccl-tests' all_reduce_perf): the message sizes, algbw/busbw, and the table it prints.
// No CUDA here, so it is unit-tested on any machine.
//
//   algbw = bytes / time
//   busbw = algbw * 2(n-1)/n   (a ring all-reduce moves 2(n-1)/n of the buffer through each rank's
//                               link, so busbw compares with the hardware's link bandwidth for any n)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meshrun::tools {

struct SweepOptions {
  uint64_t min_bytes = 8;             // -b
  uint64_t max_bytes = 256ull << 20;  // -e
  int factor = 2;                     // -f: each size is the previous one times this
  int warmup = 5;                     // -w: untimed iterations per size
  int iters = 20;                     // -n: timed iterations per size
};

/// "8", "64K", "256M", "1G" (powers of 1024, as nccl-tests reads them); throws UsageError.
uint64_t parse_size(const std::string& text);

/// min, min*factor, ... up to max, each rounded down to whole `element_bytes` (at least one element);
/// throws UsageError naming the bad value (factor < 2, min > max, zero sizes).
std::vector<uint64_t> sweep_sizes(const SweepOptions& options, uint64_t element_bytes);

/// GB/s (1e9 bytes/s) of `bytes` reduced in `seconds`.
double algbw_gbps(uint64_t bytes, double seconds);
/// algbw * 2(n-1)/n; 0 for a single rank (nothing crosses a link).
double allreduce_busbw_gbps(double algbw, int ranks);

struct SweepRow {
  uint64_t bytes = 0;
  uint64_t count = 0;          // elements
  double out_of_place_us = 0;  // average time of one all-reduce, slowest rank
  double in_place_us = 0;
};

/// The '#' header lines (column titles in nccl-tests' layout).
std::string sweep_header();
/// One fixed-width row: size, count, type, redop, root, then time/algbw/busbw/#wrong twice.
std::string format_sweep_row(const SweepRow& row, int ranks, const std::string& type_name);
/// "# Avg bus bandwidth    : X" over the rows' out-of-place and in-place busbw.
std::string sweep_footer(const std::vector<SweepRow>& rows, int ranks);

}  // namespace meshrun::tools
