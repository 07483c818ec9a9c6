// tools/sdma-probe/mem_budget.hpp - does a run fit in memory?
//
// Before allocating, a command sums what it will allocate on each GPU and in
// host memory and refuses what does not fit, with the sum, what there is and
// the fix, instead of failing half-way or dying by the OOM killer (exit 137,
// no message). The emulator's GPU memory lives in host memory (one memfd per
// GPU), so on --backend emu every GPU byte counts against MemAvailable too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "conccl/status.hpp"
#include "conccl/topology.hpp"

namespace probe {

// Byte counts that saturate at 2^64-1 instead of wrapping.
uint64_t add_sat(uint64_t a, uint64_t b);
uint64_t mul_sat(uint64_t a, uint64_t b);
// x rounded up to a multiple of `align` (a power of two); 2^64-1 when it would wrap.
uint64_t round_up_sat(uint64_t x, uint64_t align);

// MemAvailable of /proc/meminfo text, in bytes; nullopt when absent.
std::optional<uint64_t> parse_mem_available(std::string_view meminfo);
// The kernel's MemAvailable now; nullopt when /proc/meminfo cannot be read.
std::optional<uint64_t> mem_available();

struct MemBudget {
  std::vector<uint64_t> gpu;  // device memory per GPU index
  uint64_t host = 0;          // host memory besides the GPUs' (staging, verification, host buffers)
};

// OK when `need` fits; otherwise a resource_exhausted error (exit 4) that
// gives the sum, what there is, and `fix` (which must name real flags):
//  - a GPU that needs more than its memory (Topology memory_bytes, when known);
//  - the host total above `available` (MemAvailable), where the GPU bytes
//    count as host bytes when `gpu_memory_is_host` (the emulator).
conccl::Status check_budget(const MemBudget& need, const conccl::Topology& topo, bool gpu_memory_is_host,
                            std::string_view fix, std::optional<uint64_t> available);

}  // namespace probe
