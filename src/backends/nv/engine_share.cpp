// src/backends/nv/engine_share.cpp - how work is shared between copy
// engines: bytes split by PCE count (stripe) and the engine set for a
// bandwidth budget (pick_for_rate). Pure functions, tested on the CPU.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "conccl/nv.hpp"

namespace conccl::nv {

std::vector<uint64_t> stripe(uint64_t bytes, std::span<const int> weights, uint64_t align) {
  std::vector<uint64_t> out(weights.size(), 0);
  if (weights.empty() || bytes == 0) return out;
  if (align == 0) align = 1;
  uint64_t total = 0;
  for (int w : weights) total += w > 0 ? static_cast<uint64_t>(w) : 0;
  if (total == 0) {
    out[0] = bytes;
    return out;
  }
  uint64_t given = 0;
  size_t last = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0) continue;
    last = i;
    const unsigned __int128 share = static_cast<unsigned __int128>(bytes) * static_cast<uint64_t>(weights[i]) / total;
    out[i] = static_cast<uint64_t>(share) / align * align;
    given += out[i];
  }
  out[last] += bytes - given;
  return out;
}

std::vector<size_t> pick_for_rate(std::span<const RateCandidate> engines, double need_bytes_per_s,
                                  double pce_bytes_per_s) {
  std::vector<size_t> usable;
  for (size_t i = 0; i < engines.size(); ++i)
    if (engines[i].pces > 0) usable.push_back(i);
  if (usable.empty()) return {};
  // Every subset is tried (at most 2^16 of them: a Hopper has 10 LCEs, of
  // which 3 are asynchronous with PCEs), so the answer is the true minimum
  // rather than a greedy guess: {2,2} beats {12} for a 4-PCE need.
  const size_t n = std::min<size_t>(usable.size(), 16);
  struct Key {
    int pces, shared, count;
    bool operator<(const Key& o) const {
      if (pces != o.pces) return pces < o.pces;
      if (shared != o.shared) return shared < o.shared;
      return count < o.count;
    }
  };
  bool found = false;
  Key best{std::numeric_limits<int>::max(), 0, 0};
  uint32_t best_mask = 0;
  for (uint32_t mask = 1; mask < (1u << n); ++mask) {
    Key k{0, 0, 0};
    for (size_t b = 0; b < n; ++b)
      if (mask & (1u << b)) {
        const RateCandidate& e = engines[usable[b]];
        k.pces += e.pces;
        k.shared += e.shared ? 1 : 0;
        k.count += 1;
      }
    if (double(k.pces) * pce_bytes_per_s < need_bytes_per_s) continue;
    if (!found || k < best) {
      found = true;
      best = k;
      best_mask = mask;
    }
  }
  if (!found) return usable;  // nothing is fast enough: the fastest set, all of them
  std::vector<size_t> out;
  for (size_t b = 0; b < n; ++b)
    if (best_mask & (1u << b)) out.push_back(usable[b]);
  return out;
}

}  // namespace conccl::nv
