// tools/bench/nv_bench_util.hpp - what the NVIDIA benchmark programs share:
// order statistics with their JSON form, and opening our RM client in a
// process where CUDA already holds part of the address space.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backends/nv/nv_device.hpp"

namespace conccl::bench {

struct Stats {
  double min = 0, p10 = 0, median = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
  size_t n = 0;
};

// Nearest-rank percentiles of `v` (taken by value: it is sorted).
inline Stats stats(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto q = [&](double p) { return v[std::min(v.size() - 1, static_cast<size_t>(p * double(v.size() - 1) + 0.5))]; };
  s.n = v.size();
  s.min = v.front();
  s.p10 = q(0.1);
  s.median = q(0.5);
  s.p90 = q(0.9);
  s.p99 = q(0.99);
  s.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / double(v.size());
  return s;
}

inline std::string stats_json(const Stats& s) {
  char b[256];
  std::snprintf(b, sizeof b,
                "{\"n\": %zu, \"min\": %.4f, \"p10\": %.4f, \"median\": %.4f, \"p90\": %.4f, \"p99\": %.4f, "
                "\"max\": %.4f, \"mean\": %.4f}",
                s.n, s.min, s.p10, s.median, s.p90, s.p99, s.max, s.mean);
  return b;
}

// Opens an nv::Gpu in a process where CUDA already holds part of the
// address space: the device places its windows where nothing is mapped (the
// ring window in a free range below 1 TiB, the data window where the kernel
// puts it; nv::Options), so the defaults work. Null with *why set on failure.
inline std::unique_ptr<nv::Gpu> open_beside_cuda(Status* why) {
  Result<std::unique_ptr<nv::Gpu>> d = nv::Gpu::open(nv::Options{});
  if (d.ok()) return std::move(d).value();
  if (why) *why = d.status();
  return nullptr;
}

}  // namespace conccl::bench
