// src/event_wakeup.cpp - the packets that wake a host sleeping on a queue's
// TRAP event, for every backend.
//
// KFD (kfd_events.c, reached from kfd_int_process_v9.c on an SDMA TRAP
// interrupt) looks the event up by the TRAP's context id and wakes it only
// if its slot in the events page (the "mailbox", HsaEvent.EventData.HWData2)
// is marked signaled, so the FENCE of the id to the mailbox comes first: the
// canonical tail used by kfdtest, ROCr's BlitSdma and tinygrad
// (shared/reference/kfd_queues.md §2.4). The emulator has no mailbox.
#include "conccl/device.hpp"
#include "conccl/queue.hpp"

namespace conccl {

Status enqueue_wakeup(CommandBuffer& cb, const Event& ev) {
  const size_t before = cb.packet_count();
  Status st;
  if (ev.mailbox_va() != 0) st = cb.fence(ev.mailbox_va(), ev.trap_context());
  if (st.ok()) st = cb.trap(ev.trap_context());
  if (!st.ok() && cb.packet_count() != before)
    return error(Code::internal, "wake-up half-recorded (FENCE without TRAP): " + st.message());
  return st;
}

}  // namespace conccl
