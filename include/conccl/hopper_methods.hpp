// conccl/hopper_methods.hpp - the Hopper encoder: methods that only NVIDIA
// Hopper channels have, appended into a CommandBuffer of Isa::hopper().
//
// The vocabulary (conccl/commands.hpp) covers copies, fills, signals, waits
// and timestamps on every engine; this is the door for the rest: binding the
// copy class to its subchannel, interrupts, and releases with their options.
// Each call appends whole method groups or nothing; a buffer of another Isa
// refuses every call with Code::invalid_argument. Methods:
// open-gpu-doc classes/dma-copy/clc8b5.h (HOPPER_DMA_COPY_A) and
// open-gpu-kernel-modules src/common/sdk/nvidia/inc/class/clc86f.h
// (HOPPER_CHANNEL_GPFIFO_A).
#pragma once

#include <cstdint>

#include "conccl/commands.hpp"

namespace conccl {

class HopperMethods {
 public:
  explicit HopperMethods(CommandBuffer& cb) : cb_(cb) {}

  // SET_OBJECT(HOPPER_DMA_COPY_A) on the copy subchannel: a channel's first
  // submission carries it.
  Status bind_copy_object();
  // Host WFI, then NON_STALL_INTERRUPT: the interrupt follows all earlier work.
  Status nonstall_interrupt();
  // Copy-engine semaphore release after earlier work (FLUSH): the 64-bit
  // value at slot+0 and, with `timestamp`, the GPU ns time at slot+8 (a
  // 16-byte slot); with `interrupt`, a non-stall interrupt once it is written.
  Status release(uint64_t slot, uint64_t value, bool timestamp, bool interrupt);

 private:
  Status need_hopper(const char* what) const;
  CommandBuffer& cb_;
};

}  // namespace conccl
