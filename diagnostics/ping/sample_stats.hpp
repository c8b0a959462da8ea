// SampleStats: min/avg/max/mdev of round-trip samples, as ping(8) prints them.
#pragma once

#include <vector>

namespace meshrun::diagnostics {

struct SampleStats {
  int count = 0;
  double min = 0;
  double avg = 0;
  double max = 0;
  double mdev = 0;  // population standard deviation, ping(8)'s "mdev"
};

/// Statistics of `samples` (all zero when empty).
SampleStats compute_stats(const std::vector<double>& samples);

}  // namespace meshrun::diagnostics
