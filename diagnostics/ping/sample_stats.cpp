#include "diagnostics/ping/sample_stats.hpp"

#include <algorithm>
#include <cmath>

namespace meshrun::diagnostics {

SampleStats compute_stats(const std::vector<double>& samples) {
  SampleStats s;
  if (samples.empty()) return s;
  s.count = static_cast<int>(samples.size());
  s.min = *std::min_element(samples.begin(), samples.end());
  s.max = *std::max_element(samples.begin(), samples.end());
  double sum = 0;
  double sum_sq = 0;
  for (double v : samples) {
    sum += v;
    sum_sq += v * v;
  }
  s.avg = sum / s.count;
  s.mdev = std::sqrt(std::max(0.0, sum_sq / s.count - s.avg * s.avg));
  return s;
}

}  // namespace meshrun::diagnostics
