// src/queue/sdma_queue.hpp - the SDMA ring protocol, shared by the emulator
// and KFD; a backend supplies only its doorbell, engine status, progress
// sleep and wake-up packets (SdmaRingBackend).
#pragma once

#include <memory>

#include "conccl/queue.hpp"
#include "queue/sdma_frame.hpp"

namespace conccl {

// Where a ring lives: its bytes and the read/write pointer words (64-bit byte
// offsets that never wrap).
struct RingMemory {
  uint32_t* ring = nullptr;  // CPU view of the ring
  uint64_t ring_bytes = 0;   // power of two
  uint64_t* rptr = nullptr;  // written by the engine
  uint64_t* wptr = nullptr;  // written by the queue, read by the engine
  // The completion word: the engine FENCEs the low 32 bits of each
  // submission's end ticket here (SubmitFrame). Host memory the engine can
  // write; done_va is its GPU VA (4-byte aligned).
  uint32_t* done = nullptr;
  uint64_t done_va = 0;
};

class SdmaRingBackend {
 public:
  virtual ~SdmaRingBackend() = default;
  virtual void ring_doorbell(uint64_t wptr_bytes) = 0;
  virtual EngineStatus engine_status() const = 0;
  virtual int id() const = 0;  // backend-wide queue id
  // Blocks briefly until the engine may have moved rptr past `seen_rptr`, or
  // the deadline; spurious returns are fine.
  virtual void wait_progress(uint64_t seen_rptr, Deadline deadline) = 0;
  virtual Status record_wake(CommandBuffer& cb) const = 0;
  virtual Event* wake_event() = 0;
};

// Protocol (ROCr BlitSdma, tinygrad, kfdtest):
//   write packets -> release fence -> store 64-bit byte wptr -> doorbell.
// rptr/wptr are monotonic 64-bit byte counts; only the ring offset wraps. A
// packet never straddles the ring end: the tail is filled with NOPs. At most
// ring_bytes - 4 bytes are outstanding, so a full ring never looks empty to
// an engine that compares masked pointers. Tickets are wptr values.
// Every submission is wrapped in the queue's SubmitFrame and ends with the
// sequence FENCE of its end ticket; completed() is that FENCE's value, never
// rptr (which says only what the engine fetched). Rings are at most 1 GiB so
// that 32 bits of ticket identify the submission (see completed()).
class SdmaQueue final : public Queue {
 public:
  // ring.done must be set and the frame made for ring.done_va (make_frame).
  SdmaQueue(int gpu, int engine, Isa isa, Caps caps, RingMemory ring, SubmitFrame frame,
            std::unique_ptr<SdmaRingBackend> backend);
  static constexpr uint64_t kMaxRingBytes = uint64_t(1) << 30;
  ~SdmaQueue() override;

  int id() const override { return backend_->id(); }
  size_t ring_bytes() const override { return ring_.ring_bytes; }
  // A buffer may need up to its largest packet of NOP padding at the ring end,
  // and the frame around it.
  size_t max_submit_bytes() const override { return ring_.ring_bytes - 256 - frame_.overhead_bytes(); }
  // The end ticket of the last submission whose sequence FENCE landed.
  uint64_t completed() const override;
  uint64_t rptr() const;  // bytes fetched by the engine (monotonic): not completion
  uint64_t wptr() const;  // bytes published (monotonic)
  // The engine moves rptr as it fetches; a sleeper wakes on that (or on the
  // backend's slice) and re-checks completed().
  void wait_for_progress(uint64_t, Deadline deadline) const override { backend_->wait_progress(rptr(), deadline); }
  const SubmitFrame& frame() const { return frame_; }
  Status record_wake(CommandBuffer& cb) const override { return backend_->record_wake(cb); }
  Event* wake_event() override { return backend_->wake_event(); }
  EngineStatus engine_status() const override { return backend_->engine_status(); }
  std::string diagnose(size_t max_commands = 16) const override;
  SdmaRingBackend& backend() { return *backend_; }

 protected:
  uint32_t* ring_reserve(size_t bytes, Deadline deadline, Status* why) override;
  uint64_t ring_commit(size_t bytes) override;
  Result<uint64_t> ring_submit(const CommandBuffer& cb, Deadline deadline) override;
  bool engine_halted() const override {
    return backend_->engine_status().state == EngineStatus::State::halted;
  }
  void ring_expose(uint64_t end) override;  // wptr + doorbell: everything before `end` is the engine's

 private:
  Status wait_for_space(uint64_t end, Deadline deadline, uint64_t start);
  void write_nops(uint64_t at, uint64_t bytes);
  void write_tail(uint64_t at, uint64_t work_bytes, uint64_t* end);
  void publish(uint64_t end);  // or holds it (hold_): written, wptr not yet moved

  RingMemory ring_;
  SubmitFrame frame_;
  std::unique_ptr<SdmaRingBackend> backend_;
  uint64_t next_wptr_ = 0;  // guarded by submit_mu_
  uint64_t reserved_at_ = 0;  // ring_reserve: where the reserved space starts (after padding)
};

}  // namespace conccl
