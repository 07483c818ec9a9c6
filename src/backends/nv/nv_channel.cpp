// src/backends/nv/nv_channel.cpp - submission and completion on one channel.
//
// Submit (nvidia_ce.md §2.5 step 11): pushbuffer bytes, then the GP entry
// (packets/hopper_ce encode_gp_entry), a store fence, GP_PUT in USERD (+0x8c),
// a store fence, and the work-submit token to the usermode doorbell (+0x90).
// Every submission ends with a CE semaphore release of the channel's
// timeline value (with the GPU timestamp), so completion, pushbuffer reuse and
// GP-entry reuse all follow one monotonic 64-bit counter in host memory.
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "backends/nv/rm_abi.hpp"
#include "conccl/nv.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CONCCL_NV_SFENCE() _mm_sfence()
#define CONCCL_NV_PAUSE() _mm_pause()
#else
#include <atomic>
#define CONCCL_NV_SFENCE() std::atomic_thread_fence(std::memory_order_seq_cst)
#define CONCCL_NV_PAUSE() ((void)0)
#endif

namespace conccl::nv {

namespace {
}  // namespace

Channel::~Channel() = default;

uint64_t Channel::completed() const { return timeline_ ? timeline_[0] : 0; }
uint64_t Channel::completed_time_ns() const { return timeline_ ? timeline_[1] : 0; }

ChannelState Channel::state() const {
  ChannelState s;
  if (ring_.host) {
    const auto* userd = reinterpret_cast<const volatile uint32_t*>(static_cast<const uint8_t*>(ring_.host) +
                                                                   size_t(entries_) * 8);
    s.gp_get = userd[abi::kUserdGpGet / 4];
    s.gp_put = userd[abi::kUserdGpPut / 4];
  }
  s.submitted = submitted_;
  s.completed = completed();
  if (notifier_.host) {
    const auto* n = static_cast<const volatile abi::Notification*>(notifier_.host);
    s.notifier_info32 = n[0].info32;
    s.notifier_info16 = n[0].info16;
    s.notifier_status = n[0].status;
    s.notifier_time_ns = (uint64_t(n[0].timestamp_ns[1]) << 32) | n[0].timestamp_ns[0];
  }
  return s;
}

std::string Channel::diagnose() const {
  const ChannelState s = state();
  std::string out = "channel on LCE" + std::to_string(lce_) + " (" + std::to_string(pces_) +
                    " PCEs): GP_GET=" + std::to_string(s.gp_get) + " GP_PUT=" + std::to_string(s.gp_put) + " of " +
                    std::to_string(entries_) + " entries, timeline completed " + std::to_string(s.completed) +
                    " of " + std::to_string(s.submitted) + " submitted";
  if (s.faulted())
    out += ", error notifier: " + rc_error_name(s.notifier_info32) + " info16=" + std::to_string(s.notifier_info16) +
           " status=" + hex(s.notifier_status);
  else
    out += ", error notifier clear";
  if (s.gp_get == s.gp_put && s.completed < s.submitted)
    out += std::string(" (the PBDMA fetched every entry: the engine is waiting on a semaphore acquire, still "
                       "copying") +
           (uvm_registered_ ? ")" : ", or stalled on an MMU fault - this channel is not registered with UVM, so "
                                    "faults are not reported)");
  else if (s.gp_get != s.gp_put && s.completed < s.submitted)
    out += " (entries not yet fetched: the channel is not being scheduled, or is blocked earlier)";
  return out;
}

Status Channel::fault_status() const {
  if (!notifier_.host) return error(Code::unavailable, "channel is closed");
  // Only the error notifier (system memory, a cache-speed read) is checked
  // here: submit() and the wait loops call this, and state() also reads
  // GP_GET/GP_PUT from USERD, which sits in device memory behind BAR1 - each
  // such uncached read is a PCIe round trip of about a microsecond (run 4 in
  // docs/perf/h200-notes.md), which is where submit()'s 2 us went.
  const auto* n = static_cast<const volatile abi::Notification*>(notifier_.host);
  if (n[0].status == 0) return Status();
  const ChannelState s = state();
  return error(Code::device_fault,
               "LCE" + std::to_string(lce_) + " channel faulted: " + rc_error_name(s.notifier_info32) +
                   " (RM recovered the channel, which is now dead). Check the addresses of the commands submitted "
                   "after timeline value " + std::to_string(s.completed) +
                   " - every address must lie in memory this device allocated or imported - then open the "
                   "nv::Device again. " + diagnose());
}

Status Channel::reclaim(uint64_t need, Deadline deadline, uint64_t* start_out) {
  const uint64_t size = pushbuffer_.size;
  uint32_t spins = 0;
  while (true) {
    const uint64_t done = completed();
    while (!inflight_.empty() && inflight_.front().value <= done) inflight_.pop_front();
    const uint64_t oldest = inflight_.empty() ? pb_head_ : inflight_.front().pb_start;
    uint64_t start = pb_head_;
    if ((start % size) + need > size) start += size - (start % size);  // segments are contiguous
    const bool pb_ok = start + need - oldest <= size;
    const bool gp_ok = inflight_.size() + 1 < entries_;  // GP_PUT == GP_GET means empty
    if (pb_ok && gp_ok) {
      *start_out = start;
      return Status();
    }
    if ((++spins & 1023) == 0) {
      CONCCL_RETURN_IF_ERROR(fault_status());
      if (deadline.expired())
        return error(Code::timeout, std::string("no ") + (pb_ok ? "GPFIFO entry" : "pushbuffer space") +
                                        " became free before the deadline: the engine is not completing work. " +
                                        diagnose());
      sched_yield();
    }
    CONCCL_NV_PAUSE();
  }
}

Status Channel::submit(Deadline deadline, uint64_t* fence) {
  Status st = submit(pending_, deadline, fence);
  if (st.ok()) pending_.clear();
  return st;
}

Status Channel::submit(const hopper::CommandList& cl, Deadline deadline, uint64_t* fence) {
  return submit_list(cl, deadline, fence, false);
}

Status Channel::submit_list(const hopper::CommandList& cl, Deadline deadline, uint64_t* fence, bool interrupt) {
  if (!dev_) return error(Code::unavailable, "channel is closed");
  CONCCL_RETURN_IF_ERROR(fault_status());
  const uint64_t value = submitted_ + 1;
  tail_.clear();
  CONCCL_RETURN_IF_ERROR(tail_.signal(timeline_va_, value, interrupt));
  const uint64_t bytes = cl.size_bytes() + tail_.size_bytes();
  if (bytes > pushbuffer_.size / 2)
    return error(Code::invalid_argument, "a " + std::to_string(bytes) + "-byte submission does not fit half the " +
                                             std::to_string(pushbuffer_.size) +
                                             "-byte pushbuffer; submit in parts or raise nv::Options::pushbuffer_bytes");
  uint64_t start = 0;
  CONCCL_RETURN_IF_ERROR(reclaim(bytes, deadline, &start));
  const uint64_t off = start % pushbuffer_.size;
  auto* pb = static_cast<uint8_t*>(pushbuffer_.host) + off;
  std::memcpy(pb, cl.dwords().data(), cl.size_bytes());
  std::memcpy(pb + cl.size_bytes(), tail_.dwords().data(), tail_.size_bytes());

  hopper::GpEntry e;
  e.addr = pushbuffer_.va + off;
  e.dwords = static_cast<uint32_t>(bytes / 4);
  e.subroutine = true;
  Result<uint64_t> raw = hopper::encode_gp_entry(e);
  if (!raw.ok()) return raw.status();
  auto* ring = static_cast<volatile uint64_t*>(ring_.host);
  ring[put_ % entries_] = *raw;
  ++put_;
  CONCCL_NV_SFENCE();  // pushbuffer and GP entry before GP_PUT
  auto* userd = reinterpret_cast<volatile uint32_t*>(static_cast<uint8_t*>(ring_.host) + size_t(entries_) * 8);
  userd[abi::kUserdGpPut / 4] = static_cast<uint32_t>(put_ % entries_);
  CONCCL_NV_SFENCE();  // GP_PUT before the doorbell
  *dev_->doorbell_ = token_;

  inflight_.push_back({value, start});
  pb_head_ = start + bytes;
  submitted_ = value;
  if (fence) *fence = value;
  return Status();
}

// Spin first (a small copy completes in 3-5 us and a sleep would add tens of
// us), then sleep so that a thread waiting on a long transfer does not hold a
// core: on the engine's interrupt when the wait is for everything submitted
// and the events are set up (nv_wakeup.cpp), else in naps of doubling length.
// Faults and the deadline are checked every 256 polls and after every sleep.
Status Channel::wait_done(Deadline deadline, uint64_t fence) {
  if (!dev_) return error(Code::unavailable, "channel is closed");
  const uint64_t target = fence > submitted_ ? submitted_ : fence;
  const Options& o = dev_->opt_;
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(o.wait_spin_us);
  uint32_t spins = 0;
  uint32_t sleep_us = 2;
  if (completed() < target) ++stats_.waits;
  while (completed() < target) {
    if ((++spins & 255) == 0) {
      CONCCL_RETURN_IF_ERROR(fault_status());
      if (deadline.expired())
        return error(Code::timeout, "deadline passed waiting for timeline value " + std::to_string(target) + ": " +
                                        diagnose());
      if (std::chrono::steady_clock::now() >= spin_until) {
        if (event_fd_ >= 0 && target == submitted_) return sleep_on_interrupt(deadline, target);
        if (o.wait_max_sleep_us == 0) {
          sched_yield();
        } else {
          const auto left = deadline.remaining();
          const auto nap = std::min<std::chrono::nanoseconds>(std::chrono::microseconds(sleep_us), left);
          timespec ts{0, static_cast<long>(nap.count())};
          nanosleep(&ts, nullptr);
          ++stats_.naps;
          sleep_us = std::min(sleep_us * 2, o.wait_max_sleep_us);
          spins = 255;  // check again right after the nap
          continue;
        }
      }
    }
    CONCCL_NV_PAUSE();
  }
  return Status();
}

}  // namespace conccl::nv
