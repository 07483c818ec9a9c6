// conccl/emu.hpp - the emulated node: GPUs without a GPU.
//
// Each emulated GPU has its own "HBM" (a memfd mapped into this process, but
// addressed by engines at a GPU virtual-address window far from host
// pointers) and its DMA engines. Each engine is a thread that sleeps until
// its doorbell rings, then executes what its queues hold: SDMA packets between
// a ring's read and write pointers (mi300x, small presets), or the Hopper
// copy-engine and host methods of a GPFIFO channel's pushbuffer segments
// (h200 preset) - decoded with packets/, executed on the emulated memory.
// See docs/emulator.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "conccl/device.hpp"

namespace conccl::emu {

// GPU VA layout of the emulated node.
inline constexpr uint64_t kHostVaBase = 0x0000080000000000ull;   // system memory (GTT)
inline constexpr uint64_t kChannelVaBase = 0x0000004000000000ull; // GPFIFO rings and pushbuffers (< 2^40)
inline constexpr uint64_t kChannelArenaBytes = 256ull << 20;
inline constexpr uint64_t kGpuVaBase = 0x0000100000000000ull;    // GPU g's HBM at base + g * stride
inline constexpr uint64_t kGpuVaStride = 0x0000010000000000ull;  // 1 TiB per GPU
// Process slot s (DeviceOptions::process_slot) adds s * kSlotStride to the
// host and GPU windows, so that processes of one communicator map each
// other's arenas at the addresses their owners use. The channel arena is
// private to a process and does not move.
inline constexpr uint64_t kSlotStride = 0x0000200000000000ull;  // 32 TiB
inline constexpr int kMaxProcessSlots = 16;

// Fault injection, per engine, for tests and for `sdma-probe --inject`.
struct Injection {
  bool stall = false;                        // fetch nothing until cleared (rptr never moves)
  uint32_t drop_completions = 0;             // skip the next N FENCE/ATOMIC/MEM_INCR writes
  std::chrono::microseconds delay{0};        // extra time spent on every packet
  // Every packet takes this many times as long as it took (a throttled link):
  // unlike a fixed delay, load on the machine slows the engine and its peers
  // alike, so its rate against theirs stays 1/slowdown.
  uint32_t slowdown = 1;
  // Hardware model, not a fault: write rptr back when a packet is fetched,
  // before it executes, as SDMA's rptr write-back may (it reports fetch
  // progress). Completion must then come from a value the engine writes.
  bool early_rptr = false;
};

struct EngineStats {
  uint64_t packets = 0;
  uint64_t bytes_copied = 0;
  uint64_t dropped_completions = 0;
  uint64_t poll_timeouts = 0;  // finite-retry polls that gave up
  // Executed as no-ops (the emulator is coherent), counted so that tests
  // can check that submissions carry them: the firmware HDP flush
  // (POLL_REGMEM register form, dword 2 = 0x80000000, or the hdp_flush form)
  // and GCR cache operations.
  uint64_t hdp_flushes = 0;
  uint64_t cache_ops = 0;
};

class EmuDevice : public Device {
 public:
  virtual Status inject(int gpu, int engine, const Injection& injection) = 0;
  virtual Result<EngineStatus> engine_status(int gpu, int engine) const = 0;
  virtual Result<EngineStats> engine_stats(int gpu, int engine) const = 0;
  // Clears a halted engine's fault; the faulting queue's unread packets are
  // dropped (its rptr jumps to its wptr), as a queue reset would.
  virtual Status reset_engine(int gpu, int engine) = 0;
  // The host wrote memory engines may be polling: they re-check it now
  // instead of at their next re-check (every 200 us). Signal::set/add do this
  // themselves; real engines poll memory and need nothing of the kind.
  virtual void wake_pollers() = 0;
};

// Creates an emulated node, as open_device does for backend "emu" (whose
// name options.backend need not hold): options.settings gives its shape -
// "preset=small gpus=4 engines=2 gen=6.0 memory_per_gpu=64M", every key
// optional (docs/emulator.md); presets "mi300x" (the default), "small",
// "h200" - and options.process_slot its address windows. An unknown key is
// an error.
Result<std::unique_ptr<EmuDevice>> create(const DeviceOptions& options);

// Preset names and one-line descriptions.
std::vector<std::pair<std::string, std::string>> presets();

}  // namespace conccl::emu
