// src/util/free_ranges.hpp - a first-fit free list of address ranges
// (start -> length), as the emulator's arenas and the KFD process-slot
// window keep them: take() splits the first range with room, give() puts a
// range back and merges it with its neighbours.
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <optional>

namespace conccl::util {

using FreeRanges = std::map<uint64_t, uint64_t>;

// The start of `bytes` taken from the first range that holds them at an
// `align`-aligned start (a power of two), or nullopt.
inline std::optional<uint64_t> take_first_fit(FreeRanges& free, uint64_t bytes, uint64_t align) {
  for (auto it = free.begin(); it != free.end(); ++it) {
    const uint64_t base = it->first, end = it->first + it->second;
    const uint64_t start = (base + align - 1) & ~(align - 1);
    if (start < base || start >= end || end - start < bytes) continue;
    free.erase(it);
    if (start > base) free[base] = start - base;
    if (end - start > bytes) free[start + bytes] = end - (start + bytes);
    return start;
  }
  return std::nullopt;
}

// [start, start + len) is free again, merged with free neighbours.
inline void give_back(FreeRanges& free, uint64_t start, uint64_t len) {
  auto next = free.lower_bound(start);
  if (next != free.end() && next->first == start + len) {
    len += next->second;
    next = free.erase(next);
  }
  if (next != free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      len += prev->second;
      free.erase(prev);
    }
  }
  free[start] = len;
}

}  // namespace conccl::util
