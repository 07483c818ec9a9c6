// src/backends/kfd/kfd_context.hpp - what the KFD device, its queues and
// events share (kfd_device.cpp): the open thunk and its fault watch, KFD
// signal events for TRAP wake-ups (or the hsa-runtime whose signals wake
// hosts instead, rocr_wake.hpp), memory the thunk allocated and mapped.
// Internal to the KFD backend; built only with libhsakmt.
#pragma once

#if defined(CONCCL_HSAKMT_NESTED_HEADER)
#include <hsakmt/hsakmt.h>
#else
#include <hsakmt.h>
#endif

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "backends/kfd/kfd_policy.hpp"
#include "backends/kfd/kfd_smi.hpp"
#include "backends/kfd/wake_event.hpp"
#include "conccl/queue.hpp"
#include "util/wait.hpp"

namespace conccl::kfd::detail {

inline constexpr size_t kPage = 4096;

class RocrRuntime;  // rocr_wake.hpp

inline size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// A thunk output struct with room to spare: if the library was built from a
// newer header than ours (a larger struct), it cannot write past our stack
// object. The padding costs nothing and removes the ABI hazard the reference
// notes for HsaIoLinkProperties, whose size has changed between thunk
// releases (hsakmttypes.h).
template <typename T>
class Out {
 public:
  Out() {
    std::memset(buf_, 0, sizeof buf_);
    p_ = new (buf_) T();
  }
  Out(const Out&) = delete;
  Out& operator=(const Out&) = delete;
  T* get() { return p_; }
  T* operator->() { return p_; }

 private:
  alignas(16) unsigned char buf_[sizeof(T) + 1024];
  T* p_;
};

// MemFlags::bits() packs the fields in hsakmttypes.h's order; the ABI test
// (tests/backends/kfd/kfd_abi_test.cpp) checks it against the header's bitfields.
inline HsaMemFlags to_hsa(const MemFlags& f) {
  HsaMemFlags m;
  m.Value = f.bits();
  return m;
}

inline HsaMemMapFlags no_map_flags() {
  HsaMemMapFlags m;
  m.Value = 0;
  return m;
}

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// State shared by the device, its queues and events: the thunk stays open
// while any of them lives.
class Context {
 public:
  ~Context() {
    if (fault_event_) hsaKmtDestroyEvent(fault_event_);
    // hsaKmtOpenKFD is reference-counted (KERNEL_ALREADY_OPENED counts too),
    // so this close pairs with our open only. The topology snapshot is
    // process-global and may be ROCr's too: it is never released here.
    if (opened_) hsaKmtCloseKFD();
  }

  Status open(const std::string& device_path) {
    errno = 0;
    const HSAKMT_STATUS s = hsaKmtOpenKFD();
    const int e = errno;
    if (s != HSAKMT_STATUS_SUCCESS && s != HSAKMT_STATUS_KERNEL_ALREADY_OPENED)
      return open_kfd_error(s, e, device_path);
    opened_ = true;
    return Status();
  }

  KfdTopology topo;
  Capabilities caps;
  QueueModeDecision mode;
  Options::Pin pin = Options::Pin::auto_;  // which GPUs' queues by_engine_id pins (plan_queue)
  TrapDecision trap;  // whether queues get KFD signal events (TRAP wake-ups)
  // Without KFD events: the hsa-runtime in the process, whose interrupt
  // signals wake hosts instead (null: waits poll with naps). Queues' events
  // share it, so ROCr stays initialised until the last is gone.
  std::shared_ptr<const RocrRuntime> rocr;
  std::atomic<int> next_queue_id{0};
  std::atomic<uint64_t> leaked{0};  // resources kept because teardown failed

  void watch_faults() {
    HsaEventDescriptor d;
    std::memset(&d, 0, sizeof d);
    d.EventType = HSA_EVENTTYPE_MEMORY;
    d.NodeId = 0;
    HsaEvent* ev = nullptr;
    // Manual reset: once a fault is reported it stays visible (ROCr creates
    // its VM-fault event the same way, amd_gpu_agent / runtime.cpp).
    if (hsaKmtCreateEvent(&d, true, false, &ev) == HSAKMT_STATUS_SUCCESS) fault_event_ = ev;
    faults_.assign(topo.gpus.size(), std::string());
  }
  bool fault_watch() const { return fault_event_ != nullptr || smi_.watching(); }
  // Without KFD events: faults and resets through SMI event files
  // (kfd_smi.hpp), which take no events page. Returns why a GPU is not
  // watched, for the topology notes ("" = every GPU is).
  std::string watch_faults_smi(SmiEvents& sys) {
    std::vector<uint32_t> ids;
    for (const GpuNode& g : topo.gpus) ids.push_back(g.gpu_id);
    faults_.assign(topo.gpus.size(), std::string());
    const Status st = smi_.open(sys, ids);
    return st.ok() ? std::string() : st.message();
  }

  // The VM fault reported for `gpu`, if any ("" = none). Asks KFD at most
  // once per millisecond; a fault is sticky (KFD stops the process's queues).
  std::string fault_for(int gpu) {
    poll_faults();
    std::lock_guard<std::mutex> lock(fault_mu_);
    return gpu >= 0 && static_cast<size_t>(gpu) < faults_.size() ? faults_[static_cast<size_t>(gpu)] : std::string();
  }

 private:
  void poll_faults();

  bool opened_ = false;
  HsaEvent* fault_event_ = nullptr;
  SmiWatch smi_;
  std::mutex fault_mu_;
  std::vector<std::string> faults_;
  std::atomic<int64_t> next_check_ns_{0};
  std::atomic<bool> faulted_{false};
};

// A host sleeps on a queue's TRAPs through a KFD signal event.
class KfdEvent final : public WakeEvent {
 public:
  KfdEvent(std::shared_ptr<Context> ctx, HsaEvent* ev) : ctx_(std::move(ctx)), ev_(ev) {}
  ~KfdEvent() override {
    if (ev_) hsaKmtDestroyEvent(ev_);
  }
  KfdEvent(const KfdEvent&) = delete;
  KfdEvent& operator=(const KfdEvent&) = delete;

  uint64_t count() const override { return count_.load(std::memory_order_acquire); }
  uint32_t last_context() const override { return ev_->EventId; }
  // What a TRAP must carry to raise this event: its id as int_ctx, after a
  // FENCE of the same id to the event's slot in the events page (the
  // "mailbox", HWData2): KFD wakes only an event whose slot was signaled
  // (kfd_events.c, reached from kfd_int_process_v9.c on an SDMA TRAP).
  uint32_t trap_context() const { return ev_->EventId; }
  uint64_t mailbox_va() const { return ev_->EventData.HWData2; }
  Status record(CommandBuffer& cb) const override { return kfd::record_wake(cb, trap_context(), mailbox_va()); }

  // count() counts wake-ups this process observed. KFD coalesces signals
  // (an auto-reset event wakes one waiter once per burst), so callers wait
  // for count()+1 and then re-check the memory they care about.
  Status wait(uint64_t target, Deadline deadline) override {
    while (count() < target) {
      if (deadline.expired())
        return error(Code::timeout, "KFD event " + std::to_string(ev_->EventId) + ": " + std::to_string(count()) +
                                        " wake-ups, " + std::to_string(target) + " awaited, before the deadline");
      errno = 0;
      const HSAKMT_STATUS s = hsaKmtWaitOnEvent(ev_, wait_slice_ms(deadline.remaining(), 100));
      const int e = errno;
      if (s == HSAKMT_STATUS_SUCCESS) {
        count_.fetch_add(1, std::memory_order_acq_rel);
      } else if (s != HSAKMT_STATUS_WAIT_TIMEOUT) {
        if (e == EINTR) continue;
        return thunk_error("hsaKmtWaitOnEvent", s, e, "event " + std::to_string(ev_->EventId));
      }
    }
    return Status();
  }

 private:
  std::shared_ptr<Context> ctx_;  // keeps the thunk open
  HsaEvent* ev_;
  std::atomic<uint64_t> count_{0};
};

Result<HsaEvent*> create_signal_event(int thunk_node);

// Memory allocated by libhsakmt and mapped to some GPUs; released in
// reverse: unmap, then free.
struct Mapping {
  void* ptr = nullptr;
  size_t size = 0;
  bool mapped = false;
  Status release() {
    Status st;
    if (mapped) {
      const HSAKMT_STATUS s = hsaKmtUnmapMemoryToGPU(ptr);
      if (s != HSAKMT_STATUS_SUCCESS) st = thunk_error("hsaKmtUnmapMemoryToGPU", s, errno, "");
      mapped = false;
    }
    if (ptr) {
      const HSAKMT_STATUS s = hsaKmtFreeMemory(ptr, size);
      if (s != HSAKMT_STATUS_SUCCESS && st.ok()) st = thunk_error("hsaKmtFreeMemory", s, errno, "");
      ptr = nullptr;
    }
    return st;
  }
};

Status map_nodes(void* ptr, size_t size, const std::vector<uint32_t>& nodes, uint64_t* alt_va, const char* what);

// Matches our GPUs to the thunk's node ids by DRM render minor (present in
// sysfs and in HsaNodeProperties of every thunk version).
Status match_thunk_nodes(const SysTopology& sys, const RenderAccess& access, KfdTopology& topo,
                         const std::string& device_path);
// Is a libhsa-runtime64 in the process, and does it use our libhsakmt?
ThunkSharing detect_thunk_sharing();
// Claims the events page with a probe event (TRAP wake-ups on), or turns
// TRAP wake-ups off with a note when another thunk copy holds it.
void probe_events_page(Context& ctx);

}  // namespace conccl::kfd::detail
