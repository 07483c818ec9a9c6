// tests/backends/kfd/fake_hsakmt.hpp - a stand-in for libhsakmt, for testing the
// KFD backend's thin layer (src/backends/kfd/kfd_device.cpp) without an AMD
// GPU.
//
// fake_hsakmt.cpp defines the hsaKmt* functions the backend calls, with the
// real header's types, so the test executable's definitions take the place
// of the library's. Behind them is a small scriptable "kernel": GPU nodes,
// allocations with their flags and GPU mappings, queue slots per engine pool
// (ENOMEM when they run out, reported the 5.2.3 way: HSAKMT_STATUS_ERROR +
// errno), signal events with a mailbox page, a VM-fault event, and one
// engine thread per queue that executes the ring's packets on host memory
// (NOP, COPY, FILL, FENCE, ATOMIC add64, TRAP, POLL_REGMEM), faulting on any
// address not mapped to its GPU, as KFD would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fakekmt {

struct Node {
  bool gpu = false;
  int drm_render_minor = 0;
  int num_sdma = 0, num_xgmi = 0;
};

struct Config {
  uint32_t kfd_major = 1, kfd_minor = 11;
  int open_status = 0;  // HSAKMT_STATUS returned by hsaKmtOpenKFD
  int open_errno = 0;
  std::vector<Node> nodes;       // the thunk's view: index = thunk node id
  int queues_per_engine = 8;     // slots per engine (pool = engines x this)
  bool small_bar = false;        // VRAM with HostAccess fails (no visible VRAM left)
  uint8_t vram_garbage = 0xAB;   // what fresh VRAM holds (KFD does not promise zeros)
  // Another libhsakmt copy in the process set KFD's events page first: every
  // signal event is refused the 5.2.3 way (HSAKMT_STATUS_ERROR, errno EINVAL;
  // linux kfd_events.c "Event page is already set").
  bool events_page_taken = false;
  // The engines log CONSTANT_FILLs but write nothing: memory then shows
  // whether the CPU wrote it (vram_garbage left = nobody did).
  bool fills_write_nothing = false;
};

// The MI300X fixture's nodes: CPU + 8 GPUs, renderD128 + 8 * i, 2 + 14 engines.
Config mi300x();

void reset(const Config& c);

struct CreatedQueue {
  int node = 0;
  int type = 0;         // HSA_QUEUE_TYPE
  uint32_t engine = 0;  // the engine the fake put it on
  uint64_t ring = 0, ring_size = 0;
};

struct Allocation {
  uint64_t ptr = 0, size = 0;
  uint32_t flags = 0;  // HsaMemFlags.Value (0 for registrations)
  int node = 0;
  bool registered = false;
  std::vector<uint32_t> mapped_nodes;
};

// A CONSTANT_FILL an engine executed.
struct Fill {
  int node = 0;  // the queue's thunk node
  uint64_t dst = 0, bytes = 0;
  uint32_t value = 0;
};

struct Stats {
  int open_count = 0;  // opens minus closes
  int live_queues = 0, live_events = 0, live_allocations = 0;
  int events_created = 0;  // hsaKmtCreateEvent calls that made an event, of any type
  std::vector<CreatedQueue> queues;  // every creation, in order
  std::vector<Allocation> allocations;  // live ones
  int alloc_calls = 0, failed_allocs = 0;
  // Executed by the engines as no-ops and counted: ROCr's firmware HDP flush
  // (POLL_REGMEM register form, dword 2 = 0x80000000) and GCR packets.
  int hdp_flushes = 0, gcr_ops = 0;
  std::vector<Fill> fills;  // every CONSTANT_FILL executed, in order
  std::vector<uint32_t> traps;  // the context id of every TRAP executed, in order
  int atomics = 0;              // ATOMIC add64s executed
};
Stats stats();

// The allocation containing ptr (empty size if none).
Allocation allocation_of(uint64_t ptr);

// Memory that another libhsakmt copy in the process (ROCr's) allocated and
// mapped to every GPU - its signals and events page: the engines may touch
// it. Cleared by reset().
void map_foreign(uint64_t ptr, uint64_t bytes);

}  // namespace fakekmt
