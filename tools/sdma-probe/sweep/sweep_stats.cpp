// tools/sdma-probe/sweep_stats.cpp - see sweep_stats.hpp.
#include "sweep/sweep_stats.hpp"

#include <algorithm>
#include <cmath>

namespace probe {

TimeStats time_stats(const std::vector<double>& us) {
  TimeStats s;
  if (us.empty()) return s;
  double sum = 0;
  for (double v : us) sum += v;
  s.mean = sum / static_cast<double>(us.size());
  s.min = *std::min_element(us.begin(), us.end());
  s.max = *std::max_element(us.begin(), us.end());
  double sq = 0;
  for (double v : us) sq += (v - s.mean) * (v - s.mean);
  s.stddev = std::sqrt(sq / static_cast<double>(us.size()));
  return s;
}

}  // namespace probe
