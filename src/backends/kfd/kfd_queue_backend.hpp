// src/backends/kfd/kfd_queue_backend.hpp - one SDMA queue of KFD under the
// ring protocol (queue/sdma_queue.hpp): its ring and completion memory, its
// doorbell, its read pointer and its host wake-up (a KFD event or a ROCr
// signal, wake_event.hpp). Internal to the KFD backend.
#pragma once

#include <string>

#include "backends/kfd/kfd_context.hpp"
#include "queue/sdma_queue.hpp"

namespace conccl::kfd::detail {

class KfdQueueBackend final : public SdmaRingBackend {
 public:
  KfdQueueBackend(std::shared_ptr<Context> ctx, int gpu, Mapping ring, Mapping done, std::unique_ptr<WakeEvent> event,
                  HSA_QUEUEID qid, volatile uint64_t* doorbell, const uint64_t* rptr, const uint64_t* wptr,
                  std::string placement)
      : ctx_(std::move(ctx)),
        gpu_(gpu),
        ring_(ring),
        done_(done),
        event_(std::move(event)),
        qid_(qid),
        doorbell_(doorbell),
        rptr_(rptr),
        wptr_(wptr),
        placement_(std::move(placement)),
        id_(ctx_->next_queue_id.fetch_add(1)) {}

  ~KfdQueueBackend() override {
    // Destroy the queue first: only then may its ring go (KFD >= 6.12 holds
    // a reference on the ring's mapping; older kernels do not, and an engine
    // still fetching from freed pages would fault).
    if (hsaKmtDestroyQueue(qid_) != HSAKMT_STATUS_SUCCESS) {
      ctx_->leaked.fetch_add(1);
      (void)event_.release();  // NOLINT: kept alive with the ring on purpose
      return;
    }
    event_.reset();
    (void)ring_.release();
    (void)done_.release();
  }
  KfdQueueBackend(const KfdQueueBackend&) = delete;
  KfdQueueBackend& operator=(const KfdQueueBackend&) = delete;

  void ring_doorbell(uint64_t wptr_bytes) override {
    // Queue::submit has stored the packets and wptr and fenced; one 64-bit
    // store of the same byte offset to the doorbell (gfx9+: 64-bit
    // doorbells, libhsakmt queues.c DOORBELL_SIZE; ROCr BlitSdma
    // UpdateWriteAndDoorbellRegister; kfdtest SDMAQueue::SubmitPacket).
    std::atomic_thread_fence(std::memory_order_release);
    *doorbell_ = wptr_bytes;
  }

  Event* wake_event() override { return event_.get(); }

  // KFD event: FENCE(mailbox, id) then TRAP(id), the canonical tail used by
  // kfdtest, ROCr's BlitSdma and tinygrad. ROCr signal: an ATOMIC add to its
  // value before that tail. Without either (TRAP wake-ups off and no
  // hsa-runtime, Context::trap / Context::rocr) nothing: sleepers poll with
  // naps (wait_progress).
  Status record_wake(CommandBuffer& cb) const override {
    if (!event_) return Status();
    return event_->record(cb);
  }

  EngineStatus engine_status() const override {
    EngineStatus s;  // KFD exposes no engine registers to user mode
    const std::string fault = ctx_->fault_for(gpu_);
    if (!fault.empty()) {
      s.state = EngineStatus::State::halted;
      s.fault = fault;
    }
    return s;
  }

  int id() const override { return id_; }

  void wait_progress(uint64_t seen_rptr, Deadline deadline) override {
    // The engine writes rptr back to memory; nothing signals that, so spin
    // briefly, then sleep in short slices (spurious returns are fine).
    std::atomic_ref<uint64_t> r(*const_cast<uint64_t*>(rptr_));
    for (int i = 0; i < 128; ++i) {
      if (r.load(std::memory_order_acquire) != seen_rptr) return;
      util::cpu_relax();
    }
    // A wake recorded into this queue and not yet raised: sleep on it (ROCr
    // signals; KFD events never sleep here). Nothing pending: nap.
    if (event_) {
      switch (event_->sleep_for_wake(deadline)) {
        case WakeEvent::Sleep::raised: return;
        case WakeEvent::Sleep::slept_out:
          // Everything fetched and still no wake: the one recorded was never
          // submitted here; stop sleeping for it.
          if (r.load(std::memory_order_acquire) ==
              std::atomic_ref<uint64_t>(*const_cast<uint64_t*>(wptr_)).load(std::memory_order_acquire))
            event_->forget_pending_wakes();
          return;
        case WakeEvent::Sleep::nothing_pending: break;
      }
    }
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(deadline.remaining(), std::chrono::microseconds(20)));
  }

 private:
  std::shared_ptr<Context> ctx_;
  int gpu_;
  Mapping ring_;
  Mapping done_;  // the queue's completion word (SubmitFrame's sequence FENCE)
  std::unique_ptr<WakeEvent> event_;
  HSA_QUEUEID qid_;
  volatile uint64_t* doorbell_;
  const uint64_t* rptr_;
  const uint64_t* wptr_;
  std::string placement_;
  int id_;
};

}  // namespace conccl::kfd::detail
