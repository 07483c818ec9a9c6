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

// Opens an nv::Device whose VA window does not collide with what CUDA (or
// anything else in the process) already mapped: tries 64 GiB windows at 64,
// 128, 256 and 512 GiB. Null with *why set when none works.
inline std::unique_ptr<nv::Device> open_beside_cuda(Status* why) {
  Status last;
  for (uint64_t base : {0x10'0000'0000ull, 0x20'0000'0000ull, 0x40'0000'0000ull, 0x80'0000'0000ull}) {
    nv::Options o;
    o.va_base = base;
    o.va_size = 64ull << 30;
    Result<std::unique_ptr<nv::Device>> d = nv::Device::open(o);
    if (d.ok()) return std::move(d).value();
    last = d.status();
    if (last.code() != Code::resource_exhausted) break;
  }
  if (why) *why = last;
  return nullptr;
}

}  // namespace conccl::bench
