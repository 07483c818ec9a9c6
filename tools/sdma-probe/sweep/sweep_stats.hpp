// tools/sdma-probe/sweep_stats.hpp - mean, min, max and standard deviation of
// the timed iterations of one sweep size.
#pragma once

#include <vector>

namespace probe {

struct TimeStats {
  double mean = 0, min = 0, max = 0, stddev = 0;  // microseconds
};

// Population standard deviation (the spread of the iterations that ran);
// all zero for an empty vector.
TimeStats time_stats(const std::vector<double>& us);

}  // namespace probe
