// src/commands/hopper_methods.cpp - the Hopper encoder (conccl/hopper_methods.hpp):
// methods beyond the vocabulary, encoded by packets/hopper_ce's emitters and
// appended through lower::Writer.
#include "conccl/sdma_packets.hpp"
#include "conccl/hopper_methods.hpp"

#include <string>

#include "commands/lowering.hpp"
#include "packets/hopper_ce.hpp"

namespace conccl {

Status HopperMethods::need_hopper(const char* what) const {
  if (cb_.isa().kind() == IsaKind::hopper_ce) return Status();
  return error(Code::invalid_argument, std::string(what) + " is a Hopper method, but this command buffer is for " +
                                           cb_.isa().name() + " (SDMA wakes the host with SdmaPackets::trap)");
}

Status HopperMethods::bind_copy_object() {
  CONCCL_RETURN_IF_ERROR(need_hopper("SET_OBJECT"));
  uint32_t tmp[hopper::kSetObjectDwords];
  hopper::put_set_object(tmp);
  return lower::append(cb_, tmp, hopper::kSetObjectDwords);
}

Status HopperMethods::nonstall_interrupt() {
  CONCCL_RETURN_IF_ERROR(need_hopper("NON_STALL_INTERRUPT"));
  uint32_t tmp[hopper::kInterruptDwords];
  hopper::put_interrupt(tmp);
  return lower::append(cb_, tmp, hopper::kInterruptDwords);
}

Status HopperMethods::release(uint64_t slot, uint64_t value, bool timestamp, bool interrupt) {
  CONCCL_RETURN_IF_ERROR(need_hopper("a semaphore release"));
  if (slot & (hopper::kSemaphoreSlotBytes - 1))
    return error(Code::invalid_argument, "release slot " + hex(slot) +
                                             " must be 16-byte aligned (payload at +0, timestamp at +8)");
  CONCCL_RETURN_IF_ERROR(hopper::check_va("release slot", slot, hopper::kSemaphoreSlotBytes));
  uint32_t tmp[hopper::kReleaseDwords];
  hopper::put_release(tmp, slot, value, timestamp, interrupt);
  return lower::append(cb_, tmp, hopper::kReleaseDwords);
}

}  // namespace conccl
