#include "proto/rules/group_ranks.hpp"

#include <algorithm>
#include <numeric>
#include <tuple>

namespace meshrun::proto {

std::vector<int> assign_group_ranks(const std::vector<RankRequest>& requests) {
  const size_t n = requests.size();
  std::vector<int> ranks(n, -1);
  std::vector<bool> taken(n, false);
  const auto take = [&](size_t i, int want) {
    if (want < 0 || static_cast<size_t>(want) >= n || taken[static_cast<size_t>(want)]) return false;
    ranks[i] = want;
    taken[static_cast<size_t>(want)] = true;
    return true;
  };
  std::vector<size_t> unranked;
  for (size_t i = 0; i < n; ++i) {
    if (!take(i, requests[i].requested_rank)) unranked.push_back(i);
  }
  std::erase_if(unranked, [&](size_t i) { return take(i, requests[i].previous_rank); });
  std::stable_sort(unranked.begin(), unranked.end(), [&](size_t a, size_t b) {
    return std::tie(requests[a].host, requests[a].pid) < std::tie(requests[b].host, requests[b].pid);
  });
  size_t next = 0;
  for (size_t i : unranked) {
    while (taken[next]) ++next;
    ranks[i] = static_cast<int>(next);
    taken[next] = true;
  }
  return ranks;
}

}  // namespace meshrun::proto
