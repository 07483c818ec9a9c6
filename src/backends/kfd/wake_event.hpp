// src/backends/kfd/wake_event.hpp - what a KFD queue's host wake-up is, whichever
// way it is built: a KFD signal event of ConCCL's own thunk (KfdEvent,
// kfd_context.hpp) or an interrupt signal of the hsa-runtime in the process
// (RocrEvent, rocr_wake.hpp). The queue backend (kfd_queue_backend.hpp) holds
// one of them, or none (waits then poll with naps).
#pragma once

#include "conccl/commands.hpp"
#include "conccl/deadline.hpp"
#include "conccl/queue.hpp"
#include "conccl/status.hpp"

namespace conccl::kfd::detail {

class WakeEvent : public Event {
 public:
  // Appends the packets that raise this event once the engine gets there.
  // All or nothing: on error cb is as it was.
  virtual Status record(CommandBuffer& cb) const = 0;

  // The queue's progress sleep (wait_progress) asks the event first.
  enum class Sleep : uint8_t {
    nothing_pending,  // no recorded wake is still to come: did not sleep (the caller naps)
    raised,           // slept, and the event was raised
    slept_out,        // slept until its slice or the deadline ran out, not raised
  };
  // Sleeps until the event is raised, at most a slice of `deadline`, but
  // only while a wake this event recorded has not come yet. The default
  // never sleeps: KFD events keep the queue's naps, as before.
  virtual Sleep sleep_for_wake(Deadline /*deadline*/) { return Sleep::nothing_pending; }
  // The engine has run everything it was given and a recorded wake still has
  // not come: it never will (its command buffer was not submitted to this
  // queue), so stop sleeping for it. Only a hint: waiters re-check memory.
  virtual void forget_pending_wakes() {}
};

}  // namespace conccl::kfd::detail
