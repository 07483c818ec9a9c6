// conccl/signal.hpp - completion signals: 64-bit monotonic counters that
// engines advance and the host, other DMA queues and compute kernels wait on.
//
// Memory layout (16 bytes, 8-byte aligned, in memory every engine reaches):
//   +0  value           the counter
//   +8  value + 2^31    a shifted twin, advanced by the same packets
// The twin makes DMA-side 64-bit ">= v" waits exact with 32-bit POLL_REGMEM
// packets: see wait_on_queue() and docs/signals.md.
//
// Ordering guarantee: an engine advances a signal with packets queued after
// the work it covers, on the same queue; SDMA executes a queue's packets in
// order and FENCE/ATOMIC write after prior packets' writes complete. So once
// a waiter observes value >= v, every byte written by the work before the
// update that made it v is visible (host: acquire load; DMA: the poll).
#pragma once

#include <cstdint>
#include <string>

#include "conccl/deadline.hpp"
#include "conccl/device.hpp"
#include "conccl/queue.hpp"
#include "conccl/status.hpp"

namespace conccl {

// Where a piece of work sits in a queue: the write pointer before its
// packets and after its signal packet. Used to diagnose hangs.
struct QueueSpan {
  Queue* queue = nullptr;
  uint64_t begin = 0;  // wptr before the work was submitted
  uint64_t end = 0;    // wptr after the signal update packet
};

class Signal {
 public:
  static constexpr uint64_t kTwinOffset = 1ull << 31;
  static constexpr size_t kBytes = 16;

  // Allocates a signal in host memory (gpu < 0) or in `gpu`'s memory.
  static Result<Signal> create(Device& device, int gpu = -1, uint64_t initial = 0);
  // A signal over memory the caller owns (16 bytes, 8-aligned, CPU-visible).
  static Result<Signal> wrap(Device& device, uint64_t va, void* host);

  Signal() = default;
  Signal(Signal&& o) noexcept { *this = std::move(o); }
  Signal& operator=(Signal&& o) noexcept;
  Signal(const Signal&) = delete;
  Signal& operator=(const Signal&) = delete;
  ~Signal();

  bool valid() const { return host_ != nullptr; }
  uint64_t va() const { return va_; }
  // Current value (acquire: work covered by it is visible once it is read).
  uint64_t value() const;
  // Host store of a new value (both words), waking engines that poll it.
  void set(uint64_t v);
  // Host atomic add, returns the new value.
  uint64_t add(uint64_t delta);

  // --- DMA side: packets appended to a command buffer ---
  // Advance by delta with 64-bit atomics (after all prior packets).
  Status enqueue_add(CommandBuffer& cb, uint64_t delta = 1) const;
  // Store an absolute value with FENCEs (low dword first, on both words).
  Status enqueue_write(CommandBuffer& cb, uint64_t v) const;
  // Make the queue wait until value >= v: POLL on the high dword, then (only
  // if it equals v's) COND_EXE + POLL on the low dword, on whichever word
  // keeps the low-dword target below 2^31, so a wrap of the low dword can
  // never be skipped over by the poll.
  Status enqueue_wait(CommandBuffer& cb, uint64_t v) const;

  // --- Host side ---
  // Waits until value >= v or the deadline. Spins briefly, then sleeps on
  // the producing queue's progress (span->queue: the emulator's futex, KFD's
  // event) or, without a span, with a short backoff. On timeout, when `span` names the queue doing
  // the work, the error carries the hang diagnosis (see diagnose_hang).
  Status wait(uint64_t v, Deadline deadline, const QueueSpan* span = nullptr) const;

  // --- Compute side ---
  // A kernel or stream waits for *(uint64_t*)address >= value.
  struct ComputeWait {
    uint64_t address;
    uint64_t value;
  };
  ComputeWait compute_wait(uint64_t v) const { return {va_, v}; }

 private:
  Device* device_ = nullptr;
  uint64_t va_ = 0;
  uint64_t* host_ = nullptr;
  Buffer owned_{};  // freed on destruction when the signal allocated it
};

// Explains why work did not complete: which queue and engine, rptr/wptr, the
// signal's expected and actual values, the engine state, the pending packets
// decoded, and the verdict: the engine never fetched; it is stuck on a poll
// (which one, waiting for what); the completion write was lost (rptr is past
// the signal packet but the value did not change); or it is still running.
std::string diagnose_hang(const QueueSpan& span, const Signal& signal, uint64_t expected);

// What the verdict was, for tests and tools.
enum class HangKind { never_fetched, stuck_on_poll, completion_lost, halted, still_running };
HangKind classify_hang(const QueueSpan& span, const Signal& signal, uint64_t expected);
const char* hang_kind_name(HangKind k);

// HSA interop: an amd_signal_t-shaped object (hsa/amd_hsa_signal.h: int64
// value at +8, event mailbox pointer at +16, event id at +24). ROCr completes
// such a signal by decrementing value, then writing the event id to the
// mailbox and raising TRAP; these packets do the same, so hsa_signal_wait_*
// and AQL barrier packets wake on DMA work.
struct HsaSignalView {
  uint64_t value_va = 0;    // &amd_signal_t.value
  uint64_t mailbox_va = 0;  // amd_signal_t.event_mailbox_ptr (0 = none)
  uint32_t event_id = 0;    // amd_signal_t.event_id
};
Status enqueue_hsa_signal_decrement(CommandBuffer& cb, const HsaSignalView& s, int64_t delta = 1);

// Triggers: commands queued behind a poll on a trigger signal, released by
// one host or device write, so command building is off the critical path.
class Trigger {
 public:
  static Result<Trigger> create(Device& device, int gpu = -1);
  // Appends the gate: the packets recorded after it wait for release().
  Status arm(CommandBuffer& cb);
  // Host release of every gate armed so far.
  void release();
  // Device release: packets (for another queue) that open the armed gates.
  Status enqueue_release(CommandBuffer& cb);
  const Signal& signal() const { return signal_; }
  // The generation the next release opens; gates armed since the last
  // release wait for it.
  uint64_t generation() const { return next_; }

 private:
  Signal signal_;
  uint64_t next_ = 1;
};

}  // namespace conccl
