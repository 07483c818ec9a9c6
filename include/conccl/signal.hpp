// conccl/signal.hpp - completion signals: 64-bit monotonic counters that
// engines advance and the host, other DMA queues and compute kernels wait on.
//
// Memory layout (16 bytes, 8-byte aligned, in memory every engine reaches);
// the instruction set owns it (Caps::signal_twin):
//   SDMA:   +0 value, +8 value + 2^31 (a shifted twin advanced by the same
//           packets, which makes 64-bit ">= v" waits exact with 32-bit
//           POLL_REGMEM packets: see docs/signals.md)
//   Hopper: +0 value (native 64-bit semaphores), +8 unused
//
// Ordering guarantee: an engine advances a signal with commands queued after
// the work it covers, on the same queue, and the update is written after the
// earlier commands' writes (SDMA FENCE/ATOMIC; Hopper releases with FLUSH and
// reductions with RELEASE_WFI). So once a waiter observes value >= v, every
// byte written by the work before the update that made it v is visible
// (host: acquire load; DMA: the poll/acquire).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "conccl/deadline.hpp"
#include "conccl/device.hpp"
#include "conccl/queue.hpp"
#include "conccl/status.hpp"

namespace conccl {

// One 64-bit store that an outside writer makes (see Signal::stores_for).
struct SignalStore {
  uint64_t va = 0;
  uint64_t value = 0;
};

class Signal {
 public:
  static constexpr uint64_t kTwinOffset = 1ull << 31;  // SDMA twin: value + 2^31 at +8
  static constexpr size_t kBytes = 16;

  // Allocates a signal in host memory (gpu < 0) or in `gpu`'s memory, in the
  // layout of the device's engines.
  static Result<Signal> create(Device& device, int gpu = -1, uint64_t initial = 0);
  // A signal over memory the caller owns (16 bytes, 8-aligned, CPU-visible).
  static Result<Signal> wrap(Device& device, uint64_t va, void* host);
  // Whether signals of `device` have the SDMA twin at +8 (Caps::signal_twin).
  static bool twin_layout(const Device& device);
  // The stores that set a signal word at va, of that layout, to v (as
  // stores_for): also for words the host cannot reach, which are no Signal.
  static std::vector<SignalStore> stores_at(uint64_t va, bool twin, uint64_t v);

  Signal() = default;
  Signal(Signal&& o) noexcept { *this = std::move(o); }
  Signal& operator=(Signal&& o) noexcept;
  Signal(const Signal&) = delete;
  Signal& operator=(const Signal&) = delete;
  ~Signal();

  bool valid() const { return host_ != nullptr; }
  uint64_t va() const { return va_; }
  // Whether the layout has the SDMA twin at +8 (Caps::signal_twin).
  bool has_twin() const { return twin_; }
  // Current value (acquire: work covered by it is visible once it is read).
  uint64_t value() const;
  // Host store of a new value (both words), waking engines that poll it.
  void set(uint64_t v);
  // Host atomic add, returns the new value.
  uint64_t add(uint64_t delta);
  // The 64-bit stores, in this order, that set the signal to v from outside
  // the host: a compute stream (cuStreamWriteValue64/hipStreamWriteValue64)
  // or another process. One store on native 64-bit layouts; the SDMA twin
  // (+8) first and the value last, so that no waiter sees one without the other
  // in a way that releases it early.
  std::vector<SignalStore> stores_for(uint64_t v) const { return stores_at(va_, twin_, v); }
  // An error unless cb's engines use this signal's layout.
  Status check_layout(const CommandBuffer& cb) const;

  // --- DMA side: commands appended to a command buffer (the vocabulary's
  // signal_add / signal_set / wait_ge; the lowering encodes the layout) ---
  // Advance by delta (after all prior commands' writes).
  Status signal_add(CommandBuffer& cb, uint64_t delta = 1) const;
  // A copy that advances this signal by delta once its writes are visible
  // (CommandBuffer::copy_add: one command where the engine can add as a copy
  // ends, else the copy and then signal_add).
  Status copy_add(CommandBuffer& cb, uint64_t dst, uint64_t src, uint64_t bytes, CommandBuffer::CopyOrder order,
                  uint64_t delta = 1) const;
  // Store an absolute value.
  Status signal_set(CommandBuffer& cb, uint64_t v) const;
  // Make the queue wait until value >= v (exact for 64-bit values: SDMA polls
  // the high dword, then the low dword of whichever word keeps its target
  // below 2^31; Hopper acquires natively).
  Status wait_ge(CommandBuffer& cb, uint64_t v,
                 CommandBuffer::WaitStyle style = CommandBuffer::WaitStyle::yield) const;

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
  bool twin_ = true;
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
