// src/queue/gpfifo_queue.cpp - the GPFIFO channel protocol shared by the
// NVIDIA backend and the emulated H200 (see gpfifo_queue.hpp).
#include "queue/gpfifo_queue.hpp"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "conccl/hopper_methods.hpp"
#include "packets/hopper_ce.hpp"
#include "util/wait.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CONCCL_SFENCE() _mm_sfence()
#else
#define CONCCL_SFENCE() std::atomic_thread_fence(std::memory_order_seq_cst)
#endif

namespace conccl {

namespace {

// The timeline release that ends every submission (payload, timestamp at +8).
constexpr size_t kTailBytes = hopper::kReleaseDwords * 4;

uint64_t load(uint64_t* p) { return std::atomic_ref<uint64_t>(*p).load(std::memory_order_acquire); }
uint32_t load32(uint32_t* p) { return std::atomic_ref<uint32_t>(*p).load(std::memory_order_acquire); }

}  // namespace

GpfifoQueue::GpfifoQueue(int gpu, int engine, Caps caps, GpfifoMemory mem, std::unique_ptr<GpfifoBackend> backend)
    : Queue(gpu, engine, Isa::hopper(), caps), mem_(mem), backend_(std::move(backend)) {
  last_ticket_.store(load(mem_.timeline));
}

GpfifoQueue::~GpfifoQueue() = default;

size_t GpfifoQueue::max_submit_bytes() const { return mem_.pushbuffer_bytes / 2 - kTailBytes; }

uint64_t GpfifoQueue::completed() const { return load(mem_.timeline); }
uint64_t GpfifoQueue::completed_time_ns() const { return load(mem_.timeline + 1); }
uint32_t GpfifoQueue::gp_get() const { return load32(mem_.userd + kUserdGpGetOffset / 4); }
uint32_t GpfifoQueue::gp_put() const { return load32(mem_.userd + kUserdGpPutOffset / 4); }

// A doorbell rung before the scheduler has put a just-created channel on its
// runlist can go unseen (seen on the H200 once in a few hundred channel
// creations: GP_GET stayed 0 for 5 s). The first submission therefore rings
// again every 200 ms until the channel takes it; ringing twice is harmless
// (the host re-reads GP_PUT).
Status GpfifoQueue::bind_copy_object(Deadline deadline) {
  uint32_t init[hopper::kSetObjectDwords];
  hopper::put_set_object(init);
  uint64_t t = 0;
  CONCCL_RETURN_IF_ERROR(submit_dwords(init, deadline, &t));
  while (true) {
    const Deadline step = Deadline::after(std::min<std::chrono::nanoseconds>(std::chrono::milliseconds(200),
                                                                              deadline.remaining()));
    Status st = wait_done(step, t);
    if (st.code() != Code::timeout || deadline.expired()) return st;
    backend_->ring_doorbell();
  }
}

Status GpfifoQueue::reclaim(uint64_t need, Deadline deadline, uint64_t* start_out) {
  const uint64_t size = mem_.pushbuffer_bytes;
  if (need > size / 2)
    return error(Code::invalid_argument, "a " + std::to_string(need) + "-byte submission does not fit half the " +
                                             std::to_string(size) +
                                             "-byte pushbuffer; submit it in parts or use a larger ring "
                                             "(QueueOptions::ring_bytes, nv::Options::pushbuffer_bytes)");
  uint32_t spins = 0;
  while (true) {
    const uint64_t done = completed();
    {
      std::lock_guard<std::mutex> lock(inflight_mu_);
      while (!inflight_.empty() && inflight_.front().value <= done) inflight_.pop_front();
    }
    const uint64_t oldest = inflight_.empty() ? pb_head_ : inflight_.front().pb_start;
    uint64_t start = pb_head_;
    if ((start % size) + need > size) start += size - (start % size);  // segments are contiguous
    const bool pb_ok = start + need - oldest <= size;
    const bool gp_ok = inflight_.size() + 1 < mem_.entries;  // GP_PUT == GP_GET means empty
    if (pb_ok && gp_ok) {
      *start_out = start;
      return Status();
    }
    if (holding()) ring_expose(put_);  // space comes only from work the engine can see
    if ((++spins & 1023) == 0) {
      CONCCL_RETURN_IF_ERROR(check_fault());
      if (deadline.expired())
        return error(Code::timeout, std::string("no ") + (pb_ok ? "GPFIFO entry" : "pushbuffer space") +
                                        " became free before the deadline: the engine is not completing work. " +
                                        diagnose(8));
      sched_yield();
    }
    util::cpu_relax();
  }
}

uint64_t GpfifoQueue::publish(uint64_t start, uint64_t bytes, bool interrupt) {
  const uint64_t value = last_ticket_.load(std::memory_order_relaxed) + 1;
  uint8_t* pb = mem_.pushbuffer + start % mem_.pushbuffer_bytes;
  uint32_t tail[hopper::kReleaseDwords];
  hopper::put_release(tail, mem_.timeline_va, value, true, interrupt);
  std::memcpy(pb + bytes, tail, kTailBytes);
  bytes += kTailBytes;

  hopper::GpEntry e;
  e.addr = mem_.pushbuffer_va + start % mem_.pushbuffer_bytes;
  e.dwords = static_cast<uint32_t>(bytes / 4);
  e.subroutine = true;
  // Cannot fail: the pushbuffer lies below 2^40 (checked when the channel was
  // made) and a segment is at most half the pushbuffer.
  const uint64_t raw = hopper::encode_gp_entry(e).value();
  mem_.gp[put_ % mem_.entries] = raw;
  ++put_;
  if (hold_) hold(value, put_);  // written, not yet visible: Queue::release publishes it
  else ring_expose(put_);         // and every held entry before it
  {
    std::lock_guard<std::mutex> lock(inflight_mu_);
    inflight_.push_back({value, start, bytes});
  }
  pb_head_ = start + bytes;
  return value;
}

// GP_PUT to `put` (every entry before it becomes the engine's), then the
// doorbell. Held entries at or before it are published with it.
void GpfifoQueue::ring_expose(uint64_t put) {
  CONCCL_SFENCE();  // pushbuffer and GP entries before GP_PUT
  std::atomic_ref<uint32_t>(mem_.userd[kUserdGpPutOffset / 4])
      .store(static_cast<uint32_t>(put % mem_.entries), std::memory_order_release);
  CONCCL_SFENCE();  // GP_PUT before the doorbell
  backend_->ring_doorbell();
  forget_held(put);
}

uint32_t* GpfifoQueue::ring_reserve(size_t bytes, Deadline deadline, Status* why) {
  uint64_t start = 0;
  *why = check_fault();
  if (why->ok()) *why = reclaim(bytes + kTailBytes, deadline, &start);
  if (!why->ok()) return nullptr;
  reserved_at_ = start;
  return reinterpret_cast<uint32_t*>(mem_.pushbuffer + start % mem_.pushbuffer_bytes);
}

uint64_t GpfifoQueue::ring_commit(size_t bytes) { return publish(reserved_at_, bytes, false); }

Result<uint64_t> GpfifoQueue::ring_submit(const CommandBuffer& cb, Deadline deadline) {
  Status why;
  uint32_t* p = ring_reserve(cb.size_bytes(), deadline, &why);
  if (!p) return why;
  std::memcpy(p, cb.dwords().data(), cb.size_bytes());
  return publish(reserved_at_, cb.size_bytes(), false);
}

Status GpfifoQueue::submit_dwords(std::span<const uint32_t> dw, Deadline deadline, uint64_t* ticket,
                                  bool interrupt) {
  std::lock_guard<std::mutex> lock(submit_mu_);
  Status why;
  uint32_t* p = ring_reserve(dw.size() * 4, deadline, &why);
  if (!p) return why;
  if (!dw.empty()) std::memcpy(p, dw.data(), dw.size() * 4);
  const uint64_t t = publish(reserved_at_, dw.size() * 4, interrupt);
  last_ticket_.store(t, std::memory_order_release);
  if (ticket) *ticket = t;
  return Status();
}

Status GpfifoQueue::check_fault() const {
  Status f = backend_->fault_status();
  if (f.ok()) return f;
  return error(f.code(), f.message() + " " + diagnose());
}

Status GpfifoQueue::record_wake(CommandBuffer& cb) const { return HopperMethods(cb).nonstall_interrupt(); }

Status GpfifoQueue::arm_interrupt(Deadline deadline) {
  if (armed_at_.load(std::memory_order_acquire) >= submitted()) return Status();
  const GpfifoBackend::WaitPolicy pol = backend_->wait_policy();
  uint32_t arm[hopper::kInterruptDwords];
  const size_t n = pol.arm_with_launch ? 0 : hopper::put_interrupt(arm);
  uint64_t t = 0;
  CONCCL_RETURN_IF_ERROR(submit_dwords(std::span<const uint32_t>(arm, n), deadline, &t, pol.arm_with_launch));
  armed_at_.store(t, std::memory_order_release);
  ++stats_.irq_arms;
  return Status();
}

// A waiter on memory this queue's commands write (a signal): sleep on the
// engine's interrupt, requested after the work submitted so far (so a waiter
// sleeps once per burst of work, not once per slice), with a short safety
// timeout; where interrupts are off, a short nap.
void GpfifoQueue::wait_for_progress(uint64_t seen, Deadline deadline) const {
  if (completed() != seen) return;
  auto* self = const_cast<GpfifoQueue*>(this);
  const GpfifoBackend::WaitPolicy pol = backend_->wait_policy();
  const auto cap = pol.interrupt ? std::chrono::microseconds(pol.safety_us) : std::chrono::microseconds(pol.max_nap_us ? pol.max_nap_us : 20);
  const auto slice = std::min<std::chrono::nanoseconds>(deadline.remaining(), cap);
  if (pol.interrupt && !self->arm_interrupt(deadline).ok()) return;  // the caller's checks report faults
  if (completed() != seen) return;
  if (self->backend_->sleep(slice)) ++self->stats_.irq_wakes;
  else ++self->stats_.irq_timeouts;
}

// Spin first (a small copy completes in 3-5 us on an H200 and a sleep would
// add tens of us), then sleep so that a thread waiting on a long transfer
// does not hold a core: on the engine's interrupt when the wait is for
// everything submitted (the waiter arms one after it), else in naps of
// doubling length. Faults and the deadline are checked every 256 polls and
// after every sleep.
Status GpfifoQueue::wait_done(Deadline deadline, uint64_t end) {
  const uint64_t published = submitted();
  const uint64_t target = end > published ? published : end;
  release(target);  // held work the caller waits for
  const GpfifoBackend::WaitPolicy pol = backend_->wait_policy();
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(pol.spin_us);
  uint32_t spins = 0, nap_us = 2;
  if (completed() < target) ++stats_.waits;
  while (completed() < target) {
    if ((++spins & 255) == 0) {
      CONCCL_RETURN_IF_ERROR(check_fault());
      if (deadline.expired())
        return error(Code::timeout, "deadline passed waiting for timeline value " + std::to_string(target) + ": " +
                                        diagnose());
      if (std::chrono::steady_clock::now() >= spin_until) {
        if (pol.interrupt && target == submitted()) return sleep_on_interrupt(deadline, target);
        if (pol.max_nap_us == 0) {
          sched_yield();
        } else {
          const auto nap = std::min<std::chrono::nanoseconds>(std::chrono::microseconds(nap_us), deadline.remaining());
          timespec ts{0, static_cast<long>(nap.count())};
          nanosleep(&ts, nullptr);
          ++stats_.naps;
          nap_us = std::min(nap_us * 2, pol.max_nap_us);
          spins = 255;  // check again right after the nap
          continue;
        }
      }
    }
    util::cpu_relax();
  }
  return Status();
}

// The interrupt follows everything submitted before the arming submission;
// events carry no channel, so every wake re-checks the timeline, and each
// sleep has a safety timeout so that a lost interrupt costs time, not a hang.
Status GpfifoQueue::sleep_on_interrupt(Deadline deadline, uint64_t target) {
  const GpfifoBackend::WaitPolicy pol = backend_->wait_policy();
  CONCCL_RETURN_IF_ERROR(arm_interrupt(deadline));
  while (completed() < target) {
    CONCCL_RETURN_IF_ERROR(check_fault());
    if (deadline.expired())
      return error(Code::timeout, "deadline passed waiting for timeline value " + std::to_string(target) +
                                      " (asleep on the engine's interrupt): " + diagnose());
    const auto nap = std::min<std::chrono::nanoseconds>(std::chrono::microseconds(pol.safety_us), deadline.remaining());
    if (backend_->sleep(nap)) ++stats_.irq_wakes;
    else ++stats_.irq_timeouts;
  }
  return Status();
}

std::string GpfifoQueue::diagnose(size_t max_commands) const {
  const uint64_t done = completed(), sub = submitted();
  const EngineStatus es = engine_status();
  const uint32_t get = gp_get(), put = gp_put();
  std::string out = "queue " + std::to_string(id()) + " on gpu " + std::to_string(gpu()) + " engine " +
                    std::to_string(engine()) + " (" + isa().name() + ", " + backend_->describe() +
                    "): GP_GET=" + std::to_string(get) + " GP_PUT=" + std::to_string(put) + " of " +
                    std::to_string(mem_.entries) + " entries, timeline completed " + std::to_string(done) + " of " +
                    std::to_string(sub) + " submitted; engine " + es.detail();
  if (const uint64_t h = held(); h) out += "; written but held (submit_held) up to timeline value " + std::to_string(h);
  if (done < sub) {
    if (get == put && !held()) out += " (every entry fetched: the engine is waiting on a semaphore acquire or still copying)";
    else out += " (entries not yet fetched: the channel is not being scheduled, or is blocked earlier)";
  }
  // The commands of the first submission not yet completed.
  std::lock_guard<std::mutex> lock(inflight_mu_);
  for (const InFlight& s : inflight_) {
    if (s.value <= done) continue;
    const auto* dw = reinterpret_cast<const uint32_t*>(mem_.pushbuffer + s.pb_start % mem_.pushbuffer_bytes);
    hopper::Disassembly d = hopper::disassemble(std::span<const uint32_t>(dw, s.bytes / 4));
    out += "; pending (timeline " + std::to_string(s.value) + "):";
    for (size_t i = 0; i < d.lines.size() && i < max_commands; ++i) out += "\n  " + d.lines[i];
    if (d.lines.size() > max_commands) out += "\n  ... (" + std::to_string(d.lines.size() - max_commands) + " more)";
    break;
  }
  return out;
}

}  // namespace conccl
