// src/backends/nv/nv_channel.cpp - one RM channel as the backend of the shared
// GPFIFO protocol (src/queue/gpfifo_queue.cpp), and nv::Channel over it.
//
// The doorbell is the channel's work-submit token written to the usermode
// region (+0x90); faults are RC errors RM writes to the channel's error
// notifier (system memory, so reading it costs a cache access, unlike USERD,
// which sits in device memory behind BAR1: each uncached read there is a PCIe
// round trip of about a microsecond - run 4 in docs/perf/h200-notes.md -
// so only diagnosis reads GP_GET/GP_PUT).
#include <sys/mman.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "backends/nv/nv_device.hpp"
#include "backends/nv/rm_abi.hpp"

namespace conccl::nv {

NvChannel::NvChannel(Gpu* d, int l, int p) : dev(d), lce(l), pces(p) {}

NvChannel::~NvChannel() { release(); }

void NvChannel::release() {
  if (!dev) return;
  Gpu& d = *dev;
  d.teardown_wakeup(*this);
  if (uvm_registered) {
    abi::UvmUnregisterChannel u{};
    std::memcpy(u.gpuUuid, d.info_.uuid, 16);
    u.hClient = d.h_client_;
    u.hChannel = h_channel;
    (void)d.uvm_ioctl(d.fd_uvm_, abi::kUvmUnregisterChannel, &u, &u.rmStatus, "UVM_UNREGISTER_CHANNEL");
    uvm_registered = false;
  }
  if (uvm_range_bytes) {
    d.release_va(uvm_range_va, uvm_range_bytes);
    uvm_range_bytes = 0;
  }
  // Freeing the group stops and frees its channel and copy object.
  if (h_group) (void)d.rm_free(d.h_device_, h_group, "channel group");
  h_group = h_channel = h_copy = 0;
  for (Allocation* b : {&ring, &pushbuffer, &notifier})
    if (b->handle) (void)d.free(*b);
  // The timeline slot stays with the slot page (freed with the Gpu); a
  // closed channel reads it no more.
  d.live_.erase(this);
  dev = nullptr;
}

void NvChannel::ring_doorbell() { *dev->doorbell_ = token; }

ChannelState NvChannel::state() const {
  ChannelState s;
  if (queue) {
    s.gp_get = queue->gp_get();
    s.gp_put = queue->gp_put();
    s.submitted = queue->submitted();
    s.completed = queue->completed();
  }
  if (notifier.host) {
    const auto* n = static_cast<const volatile abi::Notification*>(notifier.host);
    s.notifier_info32 = n[0].info32;
    s.notifier_info16 = n[0].info16;
    s.notifier_status = n[0].status;
    s.notifier_time_ns = (uint64_t(n[0].timestamp_ns[1]) << 32) | n[0].timestamp_ns[0];
  }
  return s;
}

Status NvChannel::fault_status() const {
  if (!dev || !notifier.host)
    return error(Code::unavailable, "the LCE" + std::to_string(lce) +
                                        " channel is closed (its nv device was closed first); create a new queue");
  if (event_lost)
    return error(Code::device_fault, "the event file of LCE" + std::to_string(lce) +
                                         " reported POLLHUP/POLLERR (GPU lost or the driver closed it)");
  const auto* n = static_cast<const volatile abi::Notification*>(notifier.host);
  if (n[0].status == 0) return Status();
  return error(Code::device_fault,
               "LCE" + std::to_string(lce) + " channel faulted: " + rc_error_name(n[0].info32) +
                   " (info16=" + std::to_string(n[0].info16) + ", status=" + hex(n[0].status) +
                   "; RM recovered the channel, which is now dead). Check the addresses of the commands submitted "
                   "after the last completed timeline value - every address must lie in memory this device "
                   "allocated or imported - then create a new queue");
}

EngineStatus NvChannel::engine_status() const {
  EngineStatus s;
  Status f = fault_status();
  if (!f.ok()) {
    s.state = EngineStatus::State::halted;
    s.fault = f.message();
    return s;
  }
  // No engine registers reach user mode: busy or idle by the timeline.
  if (queue) s.state = queue->completed() < queue->submitted() ? EngineStatus::State::running : EngineStatus::State::idle;
  return s;
}

std::string NvChannel::describe() const {
  std::string out = "LCE" + std::to_string(lce) + ", " + std::to_string(pces) + " PCEs";
  if (notifier.host) {
    const auto* n = static_cast<const volatile abi::Notification*>(notifier.host);
    out += n[0].status == 0 ? ", error notifier clear" : ", error notifier: " + rc_error_name(n[0].info32);
  }
  if (!uvm_registered)
    out += ", not registered with UVM: an MMU fault stalls the channel instead of being reported";
  return out;
}

GpfifoBackend::WaitPolicy NvChannel::wait_policy() const {
  WaitPolicy p;
  if (!dev) return p;
  const Options& o = dev->opt_;
  p.spin_us = o.wait_spin_us;
  p.max_nap_us = o.wait_max_sleep_us;
  p.interrupt = event_fd >= 0;
  p.arm_with_launch = o.irq_source == IrqSource::copy_launch;
  p.safety_us = std::max<uint32_t>(1000, o.wait_max_sleep_us * 10);
  return p;
}

// ---- nv::Channel ----------------------------------------------------------------

Channel::Channel(std::unique_ptr<GpfifoQueue> q)
    : q_(std::move(q)), be_(static_cast<NvChannel*>(&q_->backend())) {}

Channel::~Channel() = default;

CommandBuffer Channel::commands() const { return q_->command_buffer(); }

Status Channel::submit(const CommandBuffer& cb, Deadline deadline, uint64_t* ticket) {
  if (!(cb.isa() == q_->isa()))
    return error(Code::invalid_argument, "command buffer was recorded for " + cb.isa().name() +
                                             " but a channel takes Hopper CE methods; record it with "
                                             "Channel::commands()");
  return q_->submit_dwords(cb.dwords(), deadline, ticket);
}

Status Channel::run(const CommandBuffer& cb, Deadline deadline) {
  uint64_t ticket = 0;
  CONCCL_RETURN_IF_ERROR(submit(cb, deadline, &ticket));
  return wait_done(deadline, ticket);
}

Status Channel::wait_done(Deadline deadline, uint64_t ticket) { return q_->wait_done(deadline, ticket); }
uint64_t Channel::completed() const { return q_->completed(); }
uint64_t Channel::submitted() const { return q_->submitted(); }
uint64_t Channel::completed_time_ns() const { return q_->completed_time_ns(); }
Channel::WaitStats Channel::wait_stats() const { return q_->wait_stats(); }
std::string Channel::diagnose() const { return q_->diagnose(); }

}  // namespace conccl::nv
