// src/queue/gpfifo_queue.hpp - the GPFIFO channel protocol (NVIDIA host
// interface), shared by the NVIDIA backend and the emulated H200; a backend
// supplies only its doorbell, fault state, engine status and interrupt sleep
// (GpfifoBackend).
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <span>

#include "conccl/queue.hpp"

namespace conccl {

// USERD (clc86f.h Nvc86fControl): GP_GET at +0x88, GP_PUT at +0x8c.
inline constexpr uint32_t kUserdGpGetOffset = 0x88;
inline constexpr uint32_t kUserdGpPutOffset = 0x8C;
inline constexpr uint32_t kUserdBytes = 0x200;

// Where a channel lives (CPU views; GPU VAs for what the engine reads). The
// words the engine and the host both touch (GP_PUT, GP_GET, the timeline)
// are accessed with std::atomic_ref: release/acquire, which on x86 are plain
// stores and loads in program order, and which let ThreadSanitizer see the
// emulator's engine threads as the other side of the protocol.
struct GpfifoMemory {
  uint64_t* gp = nullptr;            // GP entries (power-of-two count)
  uint32_t entries = 0;
  uint32_t* userd = nullptr;         // USERD: GP_PUT written here, GP_GET read for diagnosis
  uint8_t* pushbuffer = nullptr;     // CPU view
  uint64_t pushbuffer_va = 0;        // GPU VA (< 2^40: GP entries carry 40 bits)
  uint64_t pushbuffer_bytes = 0;
  uint64_t timeline_va = 0;          // 16-byte slot in host memory: [0] value, [1] GPU ns
  uint64_t* timeline = nullptr;
};

class GpfifoBackend {
 public:
  virtual ~GpfifoBackend() = default;
  virtual int id() const = 0;
  // After GP_PUT is stored: tell the engine (the work-submit token on hardware).
  virtual void ring_doorbell() = 0;
  // ok, or Code::device_fault with what the engine reported (RC error notifier,
  // emulated fault), naming the fix.
  virtual Status fault_status() const = 0;
  virtual EngineStatus engine_status() const = 0;
  // One line about the channel for diagnosis ("LCE4 (12 PCEs), ...").
  virtual std::string describe() const = 0;

  struct WaitPolicy {
    uint32_t spin_us = 50;          // poll the timeline this long before sleeping
    uint32_t max_nap_us = 200;      // naps double from 2 us to this (0: yield)
    bool interrupt = false;         // sleep on the engine's interrupt (after arming one)
    bool arm_with_launch = false;   // arm by a timeline release with INTERRUPT_TYPE (else host WFI + NSI)
    uint32_t safety_us = 2000;      // longest sleep on the interrupt before re-checking
  };
  virtual WaitPolicy wait_policy() const = 0;
  // Sleeps until the engine's interrupt (or any progress) or `timeout`;
  // returns true when woken by an event. Spurious wakes are fine.
  virtual bool sleep(std::chrono::nanoseconds timeout) = 0;
  virtual Event* wake_event() = 0;
};

// Submission (NVIDIA's host interface: clc86f.h GP entries and USERD, and
// tinygrad's runtime/ops_nv.py): commands are copied into a
// contiguous pushbuffer segment followed by a copy-engine release of the
// channel's 64-bit timeline (with the GPU timestamp at +8); then the GP entry
// (packets/hopper_ce encode_gp_entry), a store fence, GP_PUT in USERD, a store
// fence and the doorbell. Completion, pushbuffer reuse and GP-entry reuse all
// follow the timeline, whose values are the queue's tickets.
class GpfifoQueue final : public Queue {
 public:
  GpfifoQueue(int gpu, int engine, Caps caps, GpfifoMemory mem, std::unique_ptr<GpfifoBackend> backend);
  ~GpfifoQueue() override;

  // SET_OBJECT(HOPPER_DMA_COPY_A) on the copy subchannel, submitted and
  // waited for: a channel's first submission (proves the channel runs).
  Status bind_copy_object(Deadline deadline);

  int id() const override { return backend_->id(); }
  size_t ring_bytes() const override { return mem_.pushbuffer_bytes; }
  size_t max_submit_bytes() const override;
  uint64_t completed() const override;
  // GPU ns time of the last timeline release (when the last completed
  // submission finished on the engine).
  uint64_t completed_time_ns() const;
  Status wait_done(Deadline deadline, uint64_t end = ~uint64_t(0)) override;
  void wait_for_progress(uint64_t seen, Deadline deadline) const override;
  Status record_wake(CommandBuffer& cb) const override;
  Event* wake_event() override { return backend_->wake_event(); }
  EngineStatus engine_status() const override { return backend_->engine_status(); }
  std::string diagnose(size_t max_commands = 16) const override;
  Status fault_status() const { return backend_->fault_status(); }
  // fault_status() with the diagnosis appended.
  Status check_fault() const;

  // Pre-encoded Hopper methods (nv::Channel's path; no decoding). With
  // `interrupt` the timeline release also raises a non-stall interrupt.
  Status submit_dwords(std::span<const uint32_t> dw, Deadline deadline, uint64_t* ticket = nullptr,
                       bool interrupt = false);

  struct WaitStats {
    uint64_t waits = 0;         // wait_done calls that had to wait
    uint64_t naps = 0;          // nanosleeps
    uint64_t irq_arms = 0;      // interrupt requests submitted
    uint64_t irq_wakes = 0;     // sleeps ended by the event
    uint64_t irq_timeouts = 0;  // sleeps that ran into their safety timeout
  };
  WaitStats wait_stats() const {
    return {stats_.waits.load(), stats_.naps.load(), stats_.irq_arms.load(), stats_.irq_wakes.load(),
            stats_.irq_timeouts.load()};
  }
  uint32_t gp_get() const;
  uint32_t gp_put() const;
  GpfifoBackend& backend() { return *backend_; }

 protected:
  uint32_t* ring_reserve(size_t bytes, Deadline deadline, Status* why) override;
  uint64_t ring_commit(size_t bytes) override;
  Result<uint64_t> ring_submit(const CommandBuffer& cb, Deadline deadline) override;
  bool engine_halted() const override { return !backend_->fault_status().ok(); }
  void ring_expose(uint64_t put) override;  // GP_PUT + doorbell

 private:
  Status reclaim(uint64_t bytes, Deadline deadline, uint64_t* start);
  uint64_t publish(uint64_t start, uint64_t bytes, bool interrupt);
  Status sleep_on_interrupt(Deadline deadline, uint64_t target);
  // Requests a non-stall interrupt after everything submitted so far, unless
  // one is already requested after it.
  Status arm_interrupt(Deadline deadline);

  GpfifoMemory mem_;
  std::unique_ptr<GpfifoBackend> backend_;
  // Guarded by submit_mu_:
  uint64_t put_ = 0;      // GP entries written (monotonic)
  uint64_t pb_head_ = 0;  // monotonic pushbuffer byte position
  uint64_t reserved_at_ = 0;
  struct InFlight {
    uint64_t value, pb_start, bytes;
  };
  std::deque<InFlight> inflight_;
  std::atomic<uint64_t> armed_at_{0};  // submitted() right after the last interrupt request  // also guarded by inflight_mu_ (diagnose reads it)
  mutable std::mutex inflight_mu_;
  struct {
    std::atomic<uint64_t> waits{0}, naps{0}, irq_arms{0}, irq_wakes{0}, irq_timeouts{0};
  } stats_;
};

}  // namespace conccl
