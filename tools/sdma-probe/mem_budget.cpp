// tools/sdma-probe/mem_budget.cpp
#include "mem_budget.hpp"

#include <cstdio>
#include <string>

#include "cli.hpp"

namespace probe {

using conccl::Code;

uint64_t add_sat(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint64_t mul_sat(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint64_t round_up_sat(uint64_t x, uint64_t align) {
  const uint64_t r = add_sat(x, align - 1);
  return r == UINT64_MAX ? UINT64_MAX : r & ~(align - 1);
}

std::optional<uint64_t> parse_mem_available(std::string_view meminfo) {
  constexpr std::string_view kKey = "MemAvailable:";
  for (size_t pos = 0; pos < meminfo.size();) {
    size_t nl = meminfo.find('\n', pos);
    if (nl == std::string_view::npos) nl = meminfo.size();
    std::string_view line = meminfo.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.substr(0, kKey.size()) != kKey) continue;
    line.remove_prefix(kKey.size());
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    size_t digits = 0;
    while (digits < line.size() && line[digits] >= '0' && line[digits] <= '9') ++digits;
    std::optional<uint64_t> kib = parse_uint(line.substr(0, digits));
    if (!kib || line.substr(digits) != " kB") return std::nullopt;
    return mul_sat(*kib, 1024);
  }
  return std::nullopt;
}

std::optional<uint64_t> mem_available() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return std::nullopt;
  const std::string text = read_all(f);
  std::fclose(f);
  return parse_mem_available(text);
}

namespace {

// A saturated sum (2^64-1) stands for "more than 64 bits can count".
std::string size_text(uint64_t bytes) { return bytes == UINT64_MAX ? "16 EiB or more" : format_size(bytes); }

}  // namespace

conccl::Status check_budget(const MemBudget& need, const conccl::Topology& topo, bool gpu_memory_is_host,
                            std::string_view fix, std::optional<uint64_t> available) {
  uint64_t gpu_total = 0;
  for (size_t g = 0; g < need.gpu.size(); ++g) {
    gpu_total = add_sat(gpu_total, need.gpu[g]);
    const uint64_t have = g < topo.gpus.size() ? topo.gpus[g].memory_bytes : 0;
    if (have && need.gpu[g] > have)
      return conccl::error(Code::resource_exhausted,
                           "needs " + size_text(need.gpu[g]) + " of memory on GPU " + std::to_string(g) + ", which has " +
                               format_size(have) + (gpu_memory_is_host ? " (emulated)" : "") + "; " + std::string(fix));
  }
  const uint64_t host_total = add_sat(need.host, gpu_memory_is_host ? gpu_total : 0);
  if (available && host_total > *available) {
    std::string parts = gpu_memory_is_host ? " (emulated GPU memory, which lives in host memory: " +
                                                 size_text(gpu_total) + "; staging and verification: " +
                                                 size_text(need.host) + ")"
                                           : "";
    return conccl::error(Code::resource_exhausted,
                         "needs " + size_text(host_total) + " of host memory" + parts + ", but only " +
                             format_size(*available) + " is available (MemAvailable in /proc/meminfo); " +
                             std::string(fix));
  }
  return conccl::Status();
}

}  // namespace probe
