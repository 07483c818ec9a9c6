// src/signal/signal.cpp - signals, DMA-side waits, HSA interop packets, triggers.
#include "conccl/sdma_packets.hpp"
#include "conccl/signal.hpp"

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <thread>

#include "util/wait.hpp"

namespace conccl {

namespace {

std::atomic_ref<uint64_t> word(uint64_t* p, int i) { return std::atomic_ref<uint64_t>(p[i]); }

}  // namespace

Result<Signal> Signal::create(Device& device, int gpu, uint64_t initial) {
  Result<Buffer> b = device.alloc(gpu, kBytes, gpu < 0 ? MemKind::host : MemKind::device);
  if (!b.ok()) return b.status().prefix("allocating a signal");
  if (!b->host) {
    (void)device.free(*b);
    return error(Code::unavailable, "signal memory on gpu " + std::to_string(gpu) +
                                        " is not CPU-visible on this backend; create the signal in host memory (gpu -1)");
  }
  Signal s;
  s.device_ = &device;
  s.va_ = b->va;
  s.host_ = b->as<uint64_t>();
  s.owned_ = *b;
  s.twin_ = twin_layout(device);
  s.set(initial);
  return s;
}

Result<Signal> Signal::wrap(Device& device, uint64_t va, void* host) {
  if (!host || (va & 7) || (reinterpret_cast<uintptr_t>(host) & 7))
    return error(Code::invalid_argument, "signal memory must be CPU-visible and 8-byte aligned (va " + hex(va) + ")");
  Signal s;
  s.device_ = &device;
  s.va_ = va;
  s.host_ = static_cast<uint64_t*>(host);
  s.twin_ = twin_layout(device);
  return s;
}

Signal& Signal::operator=(Signal&& o) noexcept {
  if (this != &o) {
    if (owned_.size && device_) (void)device_->free(owned_);
    device_ = o.device_;
    va_ = o.va_;
    host_ = o.host_;
    owned_ = o.owned_;
    twin_ = o.twin_;
    o.owned_ = Buffer{};
    o.host_ = nullptr;
  }
  return *this;
}

Signal::~Signal() {
  if (owned_.size && device_) (void)device_->free(owned_);
}

uint64_t Signal::value() const { return word(host_, 0).load(std::memory_order_acquire); }

// A DMA engine polls the signal, and may then read data the CPU wrote before
// it, possibly through a write-combining BAR mapping of VRAM. A release store
// orders the CPU's ordinary stores, not write-combined ones (x86 drains the WC
// buffers only at a fence or a locked instruction: Intel SDM vol. 3, "Memory
// Ordering" and "Write Combining"), so a full fence goes before the update
// (the data is out before the signal) and after it (the signal is not held in
// a WC buffer).
void Signal::set(uint64_t v) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (twin_) word(host_, 1).store(v + kTwinOffset, std::memory_order_release);
  word(host_, 0).store(v, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (device_) device_->host_wrote();
}

uint64_t Signal::add(uint64_t delta) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (twin_) word(host_, 1).fetch_add(delta, std::memory_order_acq_rel);
  const uint64_t v = word(host_, 0).fetch_add(delta, std::memory_order_acq_rel) + delta;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (device_) device_->host_wrote();
  return v;
}

bool Signal::twin_layout(const Device& device) {
  return device.gpu_count() == 0 || device.topology().gpus[0].caps().signal_twin;
}

std::vector<SignalStore> Signal::stores_at(uint64_t va, bool twin, uint64_t v) {
  std::vector<SignalStore> out;
  if (twin) out.push_back({va + 8, v + kTwinOffset});
  out.push_back({va, v});
  return out;
}

Status Signal::check_layout(const CommandBuffer& cb) const {
  if (cb.caps().signal_twin == twin_) return Status();
  return error(Code::invalid_argument, "signal at " + hex(va_) + " has the " + (twin_ ? "SDMA (twin)" : "native 64-bit") +
                                           " layout, but the command buffer is for " + cb.isa().name() +
                                           "; create signals on the device whose engines use them");
}

Status Signal::signal_add(CommandBuffer& cb, uint64_t delta) const {
  CONCCL_RETURN_IF_ERROR(check_layout(cb));
  return cb.signal_add(va_, delta);
}

Status Signal::copy_add(CommandBuffer& cb, uint64_t dst, uint64_t src, uint64_t bytes, CommandBuffer::CopyOrder order,
                        uint64_t delta) const {
  CONCCL_RETURN_IF_ERROR(check_layout(cb));
  return cb.copy_add(dst, src, bytes, order, va_, delta);
}

Status Signal::signal_set(CommandBuffer& cb, uint64_t v) const {
  CONCCL_RETURN_IF_ERROR(check_layout(cb));
  return cb.signal_set(va_, v);
}

Status Signal::wait_ge(CommandBuffer& cb, uint64_t v, CommandBuffer::WaitStyle style) const {
  CONCCL_RETURN_IF_ERROR(check_layout(cb));
  return cb.wait_ge(va_, v, style);
}

Status Signal::wait(uint64_t v, Deadline deadline, const QueueSpan* span) const {
  if (!host_) return error(Code::invalid_argument, "wait on an empty Signal");
  auto done = [&] { return value() >= v; };
  for (int i = 0; i < 2000; ++i) {
    if (done()) return Status();
    util::cpu_relax();
  }
  // Sleep on the producing queue's progress (the engine wakes us when rptr
  // moves: the signal update is a packet), else back off.
  Queue* q = span ? span->queue : nullptr;
  std::chrono::microseconds backoff{1};
  while (!done()) {
    if (q && q->engine_status().state == EngineStatus::State::halted)
      return error(Code::device_fault, diagnose_hang(*span, *this, v));
    if (deadline.expired()) {
      if (done()) break;
      return error(Code::timeout, q ? diagnose_hang(*span, *this, v)
                                    : "signal at " + hex(va_) + " did not reach " + std::to_string(v) +
                                          " (it is " + std::to_string(value()) + ")");
    }
    const auto slice = std::min<std::chrono::nanoseconds>(deadline.remaining(), std::chrono::milliseconds(1));
    if (q) {
      const uint64_t seen = q->completed();
      if (done()) break;
      q->wait_for_progress(seen, Deadline::after(slice));
    } else {
      std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(slice, backoff));
      if (backoff < std::chrono::microseconds(100)) backoff *= 2;
    }
  }
  return Status();
}

HangKind classify_hang(const QueueSpan& span, const Signal& signal, uint64_t expected) {
  const EngineStatus es = span.queue->engine_status();
  const uint64_t r = span.queue->completed();
  if (es.state == EngineStatus::State::halted) return HangKind::halted;
  if (es.state == EngineStatus::State::polling && es.wait.queue == span.queue->id()) return HangKind::stuck_on_poll;
  if (r >= span.end && signal.value() < expected) return HangKind::completion_lost;
  if (r <= span.begin) return HangKind::never_fetched;
  return HangKind::still_running;
}

const char* hang_kind_name(HangKind k) {
  switch (k) {
    case HangKind::never_fetched: return "never fetched";
    case HangKind::stuck_on_poll: return "stuck on a poll";
    case HangKind::completion_lost: return "completion write lost";
    case HangKind::halted: return "engine halted";
    case HangKind::still_running: return "still running";
  }
  return "?";
}

std::string diagnose_hang(const QueueSpan& span, const Signal& signal, uint64_t expected) {
  const HangKind k = classify_hang(span, signal, expected);
  const Queue& q = *span.queue;
  const EngineStatus es = q.engine_status();
  const uint64_t r = q.completed();
  std::string why;
  switch (k) {
    case HangKind::never_fetched:
      why = "the engine never fetched the work: its completed ticket " + hex(r) + " has not moved past its start " + hex(span.begin) +
            " (engine " + engine_state_name(es.state) + ")";
      break;
    case HangKind::stuck_on_poll:
      why = "the engine is stuck on a poll: " + es.detail();
      break;
    case HangKind::completion_lost:
      why = "the completion write was lost: the queue completed " + hex(r) + ", past the signal command (ends at " + hex(span.end) +
            ") but the signal still reads " + std::to_string(signal.value());
      break;
    case HangKind::halted:
      why = "the engine halted on a fault: " + es.fault;
      break;
    case HangKind::still_running:
      why = "the engine is still executing the work (completed " + hex(r) + " between " + hex(span.begin) + " and " +
            hex(span.end) + "); give it a longer deadline";
      break;
  }
  return "hang: " + std::string(hang_kind_name(k)) + ": signal " + hex(signal.va()) + " expected >= " +
         std::to_string(expected) + ", actual " + std::to_string(signal.value()) + "; " + why + ". " + q.diagnose();
}

Status enqueue_hsa_signal_decrement(CommandBuffer& cb, const HsaSignalView& s, int64_t delta) {
  if (!s.value_va) return error(Code::invalid_argument, "HSA signal view has no value address");
  CONCCL_RETURN_IF_ERROR(SdmaPackets(cb).atomic_add64(s.value_va, -delta));
  if (s.mailbox_va) {
    // ROCr's interrupt signals: the waiter sleeps in hsaKmtWaitOnEvent; the
    // event fires when the mailbox holds the event id and TRAP is raised.
    CONCCL_RETURN_IF_ERROR(SdmaPackets(cb).fence(s.mailbox_va, s.event_id));
    CONCCL_RETURN_IF_ERROR(SdmaPackets(cb).trap(s.event_id));
  }
  return Status();
}

Result<Trigger> Trigger::create(Device& device, int gpu) {
  Result<Signal> s = Signal::create(device, gpu, 0);
  if (!s.ok()) return s.status();
  Trigger t;
  t.signal_ = std::move(s).value();
  return t;
}

Status Trigger::arm(CommandBuffer& cb) { return signal_.wait_ge(cb, next_); }

void Trigger::release() { signal_.set(next_++); }

Status Trigger::enqueue_release(CommandBuffer& cb) {
  CONCCL_RETURN_IF_ERROR(signal_.signal_set(cb, next_));
  ++next_;
  return Status();
}

}  // namespace conccl
