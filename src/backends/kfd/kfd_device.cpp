// src/backends/kfd/kfd_device.cpp - the thin layer that calls libhsakmt.
//
// Everything that can be decided without the thunk lives in sysfs.cpp and
// policy.cpp; this file only turns those decisions into hsaKmt* calls:
// open/version/topology snapshot, memory (alloc, register, import, map),
// SDMA queues, doorbells, TRAP events and VM-fault events.
//
// Layouts and semantics come from the thunk's public headers (hsakmt.h,
// hsakmttypes.h: Debian's libhsakmt-dev 5.2.3 at /usr/include, ROCm >= 6 at
// <rocm>/include/hsakmt/) and their implementation in ROCR-Runtime
// libhsakmt/src/{openclose,topology,memory,fmm,queues,events}.c; see
// libhsakmt src/queues.c and events.c, kfdtest (ROCT-Thunk-Interface tests/kfdtest).
#if defined(CONCCL_HSAKMT_NESTED_HEADER)
#include <hsakmt/hsakmt.h>
#else
#include <hsakmt.h>
#endif

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <thread>

#include "backends/kfd/kfd_policy.hpp"
#include "backends/kfd/kfd_share.hpp"
#include "backends/kfd/kfd_smi.hpp"
#include "conccl/queue.hpp"
#include "queue/sdma_queue.hpp"
#include "util/wait.hpp"

namespace conccl::kfd {

// Our mirrors of the thunk's enums must match the header we build against.
static_assert(static_cast<uint32_t>(HSA_QUEUE_SDMA) == static_cast<uint32_t>(ThunkQueueType::sdma));
static_assert(static_cast<uint32_t>(HSA_QUEUE_SDMA_XGMI) == static_cast<uint32_t>(ThunkQueueType::sdma_xgmi));
#if defined(CONCCL_HSAKMT_HAS_CREATE_QUEUE_EXT)
static_assert(static_cast<uint32_t>(HSA_QUEUE_SDMA_BY_ENG_ID) == static_cast<uint32_t>(ThunkQueueType::sdma_by_eng_id));
#endif
static_assert(HSAKMT_STATUS_NO_MEMORY == static_cast<int>(KmtStatus::no_memory));
static_assert(HSAKMT_STATUS_OUT_OF_RESOURCES == static_cast<int>(KmtStatus::out_of_resources));
static_assert(HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED == static_cast<int>(KmtStatus::kernel_io_channel_not_opened));
static_assert(HSAKMT_STATUS_KERNEL_ALREADY_OPENED == static_cast<int>(KmtStatus::kernel_already_opened));
static_assert(HSAKMT_STATUS_WAIT_TIMEOUT == static_cast<int>(KmtStatus::wait_timeout));
static_assert(HSAKMT_STATUS_MEMORY_ALREADY_REGISTERED == static_cast<int>(KmtStatus::memory_already_registered));
static_assert(HSA_IOLINK_TYPE_XGMI == kLinkTypeXgmi && HSA_IOLINKTYPE_PCIEXPRESS == kLinkTypePcie);
static_assert(sizeof(void*) == 8, "the KFD backend needs a 64-bit process (64-bit doorbells and pointers)");

bool built_with_libhsakmt() { return true; }

std::string build_description() {
  std::string s = "libhsakmt";
#if defined(CONCCL_HSAKMT_VERSION)
  s += " " CONCCL_HSAKMT_VERSION;
#endif
#if defined(CONCCL_HSAKMT_NESTED_HEADER)
  s += " (<hsakmt/hsakmt.h>";
#else
  s += " (<hsakmt.h>";
#endif
#if defined(CONCCL_HSAKMT_HAS_CREATE_QUEUE_EXT)
  s += ", with hsaKmtCreateQueueExt)";
#else
  s += ", without hsaKmtCreateQueueExt)";
#endif
  return s;
}

namespace {

constexpr size_t kPage = 4096;

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

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
// (tests/backends/kfd_abi_test.cpp) checks it against the header's bitfields.
HsaMemFlags to_hsa(const MemFlags& f) {
  HsaMemFlags m;
  m.Value = f.bits();
  return m;
}

HsaMemMapFlags no_map_flags() {
  HsaMemMapFlags m;
  m.Value = 0;
  return m;
}

int64_t now_ns() {
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
  TrapDecision trap;  // whether queues get KFD signal events (TRAP wake-ups)
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
  void poll_faults() {
    if ((!fault_event_ && !smi_.watching()) || faulted_.load(std::memory_order_acquire)) return;
    const int64_t now = now_ns();
    int64_t next = next_check_ns_.load(std::memory_order_relaxed);
    if (now < next || !next_check_ns_.compare_exchange_strong(next, now + 1000000)) return;
    std::unique_lock<std::mutex> lock(fault_mu_, std::try_to_lock);
    if (!lock.owns_lock()) return;
    if (!fault_event_) {
      const std::vector<std::string> found = smi_.poll(::getpid());
      bool any = false;
      for (size_t i = 0; i < found.size() && i < faults_.size(); ++i)
        if (!found[i].empty()) {
          faults_[i] = found[i];
          any = true;
        }
      if (any) faulted_.store(true, std::memory_order_release);
      return;
    }
    if (hsaKmtWaitOnEvent(fault_event_, 0) != HSAKMT_STATUS_SUCCESS) return;
    const HsaMemoryAccessFault& f = fault_event_->EventData.EventData.MemoryAccessFault;
    std::string kind;
    if (f.Failure.NotPresent) kind += " page not present";
    if (f.Failure.ReadOnly) kind += " write to read-only page";
    if (f.Failure.NoExecute) kind += " no-execute";
    if (f.Failure.ECC) kind += " ECC/RAS error";
    if (f.Failure.Imprecise) kind += " (imprecise address)";
    const std::string text = "GPU memory access fault at VA " + hex(f.VirtualAddress) + ":" +
                             (kind.empty() ? std::string(" unknown cause") : kind) +
                             "; KFD has stopped this process's queues on that GPU (the process must exit to recover). "
                             "Check that every address in the packets is mapped to the engine's GPU";
    bool matched = false;
    for (const GpuNode& g : topo.gpus)
      if (static_cast<HSAuint32>(g.thunk_node) == f.NodeId) {
        faults_[static_cast<size_t>(g.index)] = text;
        matched = true;
      }
    if (!matched)
      for (std::string& s : faults_) s = text;
    faulted_.store(true, std::memory_order_release);
  }

  bool opened_ = false;
  HsaEvent* fault_event_ = nullptr;
  SmiWatch smi_;
  std::mutex fault_mu_;
  std::vector<std::string> faults_;
  std::atomic<int64_t> next_check_ns_{0};
  std::atomic<bool> faulted_{false};
};

// A host sleeps on a queue's TRAPs through a KFD signal event.
class KfdEvent final : public Event {
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

Result<HsaEvent*> create_signal_event(int thunk_node) {
  HsaEventDescriptor d;
  std::memset(&d, 0, sizeof d);
  d.EventType = HSA_EVENTTYPE_SIGNAL;
  d.NodeId = static_cast<HSAuint32>(thunk_node);
  HsaEvent* ev = nullptr;
  errno = 0;
  // Auto-reset (ManualReset=false), not signaled (hsakmt.h hsaKmtCreateEvent).
  const HSAKMT_STATUS s = hsaKmtCreateEvent(&d, false, false, &ev);
  const int e = errno;
  if (s != HSAKMT_STATUS_SUCCESS || !ev)
    return thunk_error("hsaKmtCreateEvent(HSA_EVENTTYPE_SIGNAL)", s, e,
                       "KFD allows 4096 signal events per process; destroy unused queues");
  return ev;
}

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

Status map_nodes(void* ptr, size_t size, const std::vector<uint32_t>& nodes, uint64_t* alt_va, const char* what) {
  HSAuint64 alt = 0;
  std::vector<HSAuint32> arr(nodes.begin(), nodes.end());
  errno = 0;
  const HSAKMT_STATUS s =
      hsaKmtMapMemoryToGPUNodes(ptr, size, &alt, no_map_flags(), static_cast<HSAuint64>(arr.size()), arr.data());
  const int e = errno;
  if (s != HSAKMT_STATUS_SUCCESS)
    return thunk_error("hsaKmtMapMemoryToGPUNodes", s, e,
                       std::string("mapping ") + std::to_string(size) + " bytes of " + what + " to " +
                           std::to_string(arr.size()) + " GPU(s)");
  if (alt_va) *alt_va = alt;
  return Status();
}

class KfdQueueBackend final : public SdmaRingBackend {
 public:
  KfdQueueBackend(std::shared_ptr<Context> ctx, int gpu, Mapping ring, Mapping done, std::unique_ptr<KfdEvent> event,
                  HSA_QUEUEID qid, volatile uint64_t* doorbell, const uint64_t* rptr, std::string placement)
      : ctx_(std::move(ctx)),
        gpu_(gpu),
        ring_(ring),
        done_(done),
        event_(std::move(event)),
        qid_(qid),
        doorbell_(doorbell),
        rptr_(rptr),
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

  // FENCE(mailbox, id) then TRAP(id): the canonical tail used by kfdtest,
  // ROCr's BlitSdma and tinygrad. Without an event (TRAP wake-ups off,
  // Context::trap) nothing: sleepers poll with naps (wait_progress).
  Status record_wake(CommandBuffer& cb) const override {
    if (!event_) return Status();
    return kfd::record_wake(cb, event_->trap_context(), event_->mailbox_va());
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
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(deadline.remaining(), std::chrono::microseconds(20)));
  }

 private:
  std::shared_ptr<Context> ctx_;
  int gpu_;
  Mapping ring_;
  Mapping done_;  // the queue's completion word (SubmitFrame's sequence FENCE)
  std::unique_ptr<KfdEvent> event_;
  HSA_QUEUEID qid_;
  volatile uint64_t* doorbell_;
  const uint64_t* rptr_;
  std::string placement_;
  int id_;
};

class KfdDeviceImpl final : public KfdDevice, public KfdInternals {
 public:
  // shared: the slot's shareable memory (null without a slot, or when it
  // cannot be had here: share_off says why).
  KfdDeviceImpl(std::shared_ptr<Context> ctx, int slot, std::unique_ptr<SharedMemory> shared, Status share_off)
      : ctx_(std::move(ctx)), slot_(slot), shared_(std::move(shared)), share_off_(std::move(share_off)) {}

  ~KfdDeviceImpl() override {
    utility_.clear();  // queues first: they use memory below
    shared_.reset();   // before the thunk closes (ctx_): its buffers live in the thunk's KFD process
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [va, a] : allocs_) (void)release(a);
    allocs_.clear();
  }

  const Topology& topology() const override { return ctx_->topo.topology; }
  const KfdTopology& kfd_topology() const override { return ctx_->topo; }
  QueueModeDecision queue_mode() const override { return ctx_->mode; }
  bool trap_wakeups() const override { return ctx_->trap.trap_wakeups; }
  Capabilities capabilities() const override { return ctx_->caps; }

  Result<Buffer> alloc(int gpu, size_t bytes, MemKind kind) override {
    if (bytes == 0) return error(Code::invalid_argument, "alloc of 0 bytes: give a size of at least 1");
    if (bytes > SIZE_MAX - kPage)  // round_up would wrap to 0
      return error(Code::resource_exhausted, "alloc of " + std::to_string(bytes) + " bytes: larger than any memory");
    if (shared_) return alloc_shareable(gpu, bytes, kind);
    const size_t size = round_up(bytes, kPage);
    Alloc a;
    a.origin = Origin::allocated;
    a.kind = kind;
    a.size = size;
    MemUse use = MemUse::host;
    uint32_t node = 0;  // system memory: any node; 0 is the first (CPU) node
    if (kind == MemKind::device) {
      CONCCL_RETURN_IF_ERROR(check_gpu(gpu, "alloc"));
      use = MemUse::device;
      node = static_cast<uint32_t>(ctx_->topo.gpus[static_cast<size_t>(gpu)].thunk_node);
      a.gpu = gpu;
    } else {
      a.gpu = -1;
    }
    void* p = nullptr;
    errno = 0;
    HSAKMT_STATUS s = hsaKmtAllocMemory(node, size, to_hsa(mem_flags_for(use)), &p);
    int e = errno;
    if (s != HSAKMT_STATUS_SUCCESS && use == MemUse::device) {
      // Small BAR: no CPU-visible VRAM left. Retry without a CPU mapping.
      const Status first = thunk_error("hsaKmtAllocMemory", s, e, "");
      use = MemUse::device_hidden;
      errno = 0;
      s = hsaKmtAllocMemory(node, size, to_hsa(mem_flags_for(use)), &p);
      e = errno;
      if (s != HSAKMT_STATUS_SUCCESS)
        return thunk_error("hsaKmtAllocMemory", s, e,
                           std::to_string(size) + " bytes of VRAM on gpu " + std::to_string(gpu) +
                               " (with a CPU mapping: " + first.message() + "); free memory or allocate less");
    } else if (s != HSAKMT_STATUS_SUCCESS) {
      return thunk_error("hsaKmtAllocMemory", s, e, std::to_string(size) + " bytes of host memory");
    }
    a.ptr = p;
    a.va = reinterpret_cast<uint64_t>(p);
    a.host = use == MemUse::device_hidden ? nullptr : p;
    a.mapped_gpus = map_targets(ctx_->topo, use, gpu);
    Status mapped = map_nodes(p, size, thunk_nodes(a.mapped_gpus), nullptr, mem_use_name(use));
    if (!mapped.ok() && kind == MemKind::device && a.mapped_gpus.size() > 1) {
      // A peer refused the mapping: keep the buffer usable by its own GPU;
      // map_to() reports the peer's error if it is needed later.
      a.mapped_gpus = {gpu};
      mapped = map_nodes(p, size, thunk_nodes(a.mapped_gpus), nullptr, mem_use_name(use));
    }
    if (!mapped.ok()) {
      hsaKmtFreeMemory(p, size);
      return mapped;
    }
    a.mapped = true;
    if (zero_by(use, size) == ZeroBy::cpu) {
      std::memset(a.host, 0, size);
    } else {
      Result<Queue*> zq = zero_queue(gpu);
      if (!zq.ok() && a.host) {
        std::memset(a.host, 0, size);  // no queue for the fill (slots taken, say): the BAR still works
      } else if (Status st = zq.ok() ? zero_with_sdma(**zq, a.va, size) : zq.status(); !st.ok()) {
        (void)release(a);
        return st.prefix("zeroing " + std::to_string(size) + " bytes of VRAM on gpu " + std::to_string(gpu) +
                         (a.host ? " with an SDMA fill" : " without a CPU mapping (with an SDMA fill)"));
      }
    }
    return remember(a, bytes);
  }

  Status free(const Buffer& b) override {
    if (shared_ && shared_->window().contains(b.va, 1)) return shared_->free(b.va);
    Alloc a;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = allocs_.find(b.id);
      if (it == allocs_.end())
        return error(Code::invalid_argument, "free: buffer " + hex(b.va) + " (id " + hex(b.id) +
                                                 ") was not allocated, registered or imported by this device, or "
                                                 "was freed already");
      a = it->second;
      allocs_.erase(it);
    }
    return release(a);
  }

  void* host_pointer(uint64_t va, size_t bytes) override {
    if (shared_)
      if (void* p = shared_->host_pointer(va, bytes)) return p;
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, a] : allocs_) {
      if (!a.host || va < a.va || va + bytes > a.va + a.size || va + bytes < va) continue;
      return static_cast<uint8_t*>(a.host) + (va - a.va);
    }
    return nullptr;
  }

  // Our own buffers are known exactly; any other address (HIP memory not
  // imported, say) cannot be judged from here, so it counts as mapped.
  bool is_mapped(uint64_t va, size_t bytes) override {
    if (shared_)
      if (std::optional<bool> in = shared_->covers(va, bytes)) return *in;
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, a] : allocs_)
      if (va >= a.va && va < a.va + a.size) return va + bytes <= a.va + a.size && va + bytes >= va;
    return true;
  }

  // ---- memory across processes (docs/multiprocess.md; kfd_share.hpp) ----
  int process_slot() const override { return slot_; }

  Result<SharedRegion> share(const Buffer& b, int* fd) override {
    if (!shared_) return share_refusal("share");
    return shared_->share(b.va, b.size, fd);
  }

  Status import_shared(const SharedRegion& r, int fd) override {
    if (!shared_) {
      if (fd >= 0) ::close(fd);  // ours, whatever happens
      return share_refusal("import_shared");
    }
    // Mapped as this process maps its own memory of that kind: host memory
    // to every GPU, VRAM to its GPU and that GPU's peers.
    const bool device = r.kind == MemKind::device;
    if (device) {
      if (Status st = check_gpu(r.gpu, "import_shared"); !st.ok()) {
        if (fd >= 0) ::close(fd);
        return st;
      }
    }
    return shared_->import(r, fd, map_targets(ctx_->topo, device ? MemUse::device : MemUse::host, device ? r.gpu : -1));
  }

  Result<Buffer> register_host(void* ptr, size_t bytes) override {
    if (!ptr || bytes == 0) return error(Code::invalid_argument, "register_host needs a pointer and a non-zero size");
    const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
    const uintptr_t base = p & ~(kPage - 1);
    const size_t size = round_up(p + bytes, kPage) - base;
    std::vector<int> gpus = map_targets(ctx_->topo, MemUse::host, -1);
    std::vector<uint32_t> nodes = thunk_nodes(gpus);
    std::vector<HSAuint32> arr(nodes.begin(), nodes.end());
    errno = 0;
    HSAKMT_STATUS s = hsaKmtRegisterMemoryToNodes(reinterpret_cast<void*>(base), size,
                                                  static_cast<HSAuint64>(arr.size()), arr.data());
    int e = errno;
    if (s != HSAKMT_STATUS_SUCCESS)
      return thunk_error("hsaKmtRegisterMemoryToNodes", s, e,
                         "registering " + std::to_string(size) + " bytes at " + hex(base) +
                             (s == HSAKMT_STATUS_MEMORY_ALREADY_REGISTERED
                                  ? ": a page of it belongs to another registration; register one larger range or "
                                    "align buffers to 4 KiB"
                                  : ""));
    uint64_t alt = 0;
    if (Status st = map_nodes(reinterpret_cast<void*>(base), size, nodes, &alt, "registered host memory"); !st.ok()) {
      hsaKmtDeregisterMemory(reinterpret_cast<void*>(base));
      return st;
    }
    Alloc a;
    a.origin = Origin::registered;
    a.kind = MemKind::host;
    a.gpu = -1;
    a.ptr = reinterpret_cast<void*>(base);
    a.size = size;
    a.va = alt ? alt : base;  // GPU VA of the first page (identity unless the thunk gave another)
    a.host = reinterpret_cast<void*>(base);
    a.mapped = true;
    a.mapped_gpus = gpus;
    Result<Buffer> b = remember(a, size);
    if (!b.ok()) return b;
    b->va += p - base;
    b->host = ptr;
    b->size = bytes;
    return b;
  }

  Result<Buffer> import(const void* ptr, size_t bytes, std::span<const int> gpus) override {
    if (!ptr || bytes == 0) return error(Code::invalid_argument, "import needs a pointer and a non-zero size");
    Out<HsaPointerInfo> info;
    errno = 0;
    const HSAKMT_STATUS s = hsaKmtQueryPointerInfo(ptr, info.get());
    const int e = errno;
    if (s != HSAKMT_STATUS_SUCCESS || info->Type == HSA_POINTER_UNKNOWN)
      return error(Code::not_found,
                   "import: " + hex(reinterpret_cast<uint64_t>(ptr)) +
                       " is not memory this process's libhsakmt knows (" + kmt_status_name(s) +
                       (e ? ", errno " + std::to_string(e) : std::string()) +
                       "). Allocate it with hipMalloc/hipHostMalloc/hsa_amd_memory_pool_allocate in this process, or "
                       "register host memory with register_host(). On ROCm >= 6.3 HIP's runtime carries its own "
                       "private copy of libhsakmt, so its allocations are invisible to ConCCL's (docs/hardware.md)");
    for (int g : gpus) CONCCL_RETURN_IF_ERROR(check_gpu(g, "import"));
    const uint64_t cpu_base = reinterpret_cast<uint64_t>(info->CPUAddress);
    const uint64_t base = cpu_base ? cpu_base : info->GPUAddress;
    const uint64_t p = reinterpret_cast<uint64_t>(ptr);
    if (p < base || p + bytes > base + info->SizeInBytes || p + bytes < p)
      return error(Code::out_of_range, "import: [" + hex(p) + ", +" + std::to_string(bytes) +
                                           ") runs past its allocation [" + hex(base) + ", +" +
                                           std::to_string(info->SizeInBytes) + ")");
    Alloc a;
    a.origin = Origin::imported;
    a.ptr = reinterpret_cast<void*>(base);
    a.size = info->SizeInBytes;
    a.va = info->GPUAddress;
    a.host = cpu_base && (info->Type != HSA_POINTER_ALLOCATED || info->MemFlags.ui32.HostAccess)
                 ? reinterpret_cast<void*>(cpu_base)
                 : nullptr;
    a.gpu = gpu_of_thunk_node(info->Node);
    // libhsakmt routes NonPaged allocations on a GPU node to VRAM (memory.c).
    a.kind = a.gpu >= 0 && info->Type == HSA_POINTER_ALLOCATED && info->MemFlags.ui32.NonPaged ? MemKind::device
                                                                                                : MemKind::host;
    if (a.kind == MemKind::host) a.gpu = -1;
    for (HSAuint32 i = 0; i < info->NMappedNodes && info->MappedNodes; ++i) {
      const int g = gpu_of_thunk_node(info->MappedNodes[i]);
      if (g >= 0) a.mapped_gpus.push_back(g);
    }
    a.mapped = false;  // the owner (HIP/HSA) unmaps and frees it
    if (!gpus.empty()) {
      std::vector<int> want = a.mapped_gpus;
      for (int g : gpus)
        if (std::find(want.begin(), want.end(), g) == want.end()) want.push_back(g);
      if (want.size() != a.mapped_gpus.size()) {
        CONCCL_RETURN_IF_ERROR(map_nodes(a.ptr, a.size, thunk_nodes(want), nullptr, "imported memory"));
        a.mapped_gpus = want;
      }
    }
    Result<Buffer> b = remember(a, a.size);
    if (!b.ok()) return b;
    b->va = a.va + (p - base);
    b->host = a.host ? static_cast<uint8_t*>(a.host) + (p - base) : nullptr;
    b->size = bytes;
    return b;
  }

  Status map_to(const Buffer& b, std::span<const int> gpus) override {
    for (int g : gpus) CONCCL_RETURN_IF_ERROR(check_gpu(g, "map_to"));
    if (shared_ && shared_->window().contains(b.va, 1))
      return error(Code::unavailable, "map_to: buffer " + hex(b.va) +
                                          " is shareable memory of a device with a process slot, mapped at allocation "
                                          "(host memory to every GPU, VRAM to its GPU and its peers); adding GPUs to it "
                                          "is not supported yet");
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocs_.find(b.id);
    if (it == allocs_.end())
      return error(Code::invalid_argument, "map_to: buffer " + hex(b.va) + " is not one of this device's");
    Alloc& a = it->second;
    std::vector<int> want = a.mapped_gpus;
    for (int g : gpus)
      if (std::find(want.begin(), want.end(), g) == want.end()) want.push_back(g);
    if (want.size() == a.mapped_gpus.size()) return Status();
    CONCCL_RETURN_IF_ERROR(map_nodes(a.ptr, a.size, thunk_nodes(want), nullptr, "a buffer"));
    a.mapped_gpus = want;
    return Status();
  }

  Result<std::unique_ptr<Queue>> create_queue(int gpu, int engine, const QueueOptions& opt) override {
    CONCCL_RETURN_IF_ERROR(check_gpu(gpu, "create_queue"));
    const GpuNode& g = ctx_->topo.gpus[static_cast<size_t>(gpu)];
    Result<QueuePlan> plan = plan_queue(ctx_->mode.mode, g, engine);
    if (!plan.ok()) return plan.status();
    CONCCL_RETURN_IF_ERROR(check_ring_bytes(opt.ring_bytes));
    if (Status st = pending_fault(gpu); !st.ok()) return st;

    // The ring: its own allocation of exactly its size, mapped to this GPU.
    Mapping ring;
    ring.size = opt.ring_bytes;
    errno = 0;
    HSAKMT_STATUS s = hsaKmtAllocMemory(static_cast<HSAuint32>(g.thunk_node), ring.size,
                                        to_hsa(mem_flags_for(MemUse::ring)), &ring.ptr);
    int e = errno;
    if (s != HSAKMT_STATUS_SUCCESS)
      return thunk_error("hsaKmtAllocMemory", s, e, "ring of " + std::to_string(ring.size) + " bytes");
    if (Status st = map_nodes(ring.ptr, ring.size, {static_cast<uint32_t>(g.thunk_node)}, nullptr, "a ring");
        !st.ok()) {
      (void)ring.release();
      return st;
    }
    ring.mapped = true;
    std::memset(ring.ptr, 0, ring.size);

    // The completion word the engine FENCEs after every submission (host
    // memory: the CPU reads it; its own page, mapped to this GPU).
    Mapping done;
    done.size = kPage;
    errno = 0;
    s = hsaKmtAllocMemory(0, done.size, to_hsa(mem_flags_for(MemUse::host)), &done.ptr);
    e = errno;
    if (s != HSAKMT_STATUS_SUCCESS) {
      (void)ring.release();
      return thunk_error("hsaKmtAllocMemory", s, e, "the queue's 4 KiB completion page");
    }
    if (Status st = map_nodes(done.ptr, done.size, {static_cast<uint32_t>(g.thunk_node)}, nullptr, "a completion page");
        !st.ok()) {
      (void)done.release();
      (void)ring.release();
      return st;
    }
    done.mapped = true;
    std::memset(done.ptr, 0, done.size);
    auto release_memory = [&] {
      (void)done.release();
      (void)ring.release();
    };
    Result<SubmitFrame> frame = make_frame(g.gen, frame_policy(g.gen, g.cpu_link_xgmi(), g.min_submit_bytes),
                                           reinterpret_cast<uint64_t>(done.ptr));
    if (!frame.ok()) {
      release_memory();
      return frame.status();
    }

    std::unique_ptr<KfdEvent> event;
    if (ctx_->trap.trap_wakeups) {
      Result<HsaEvent*> ev = create_signal_event(g.thunk_node);
      if (!ev.ok()) {
        release_memory();
        return ev.status();
      }
      event = std::make_unique<KfdEvent>(ctx_, *ev);
    }

    Out<HsaQueueResource> qr;
    errno = 0;
#if defined(CONCCL_HSAKMT_HAS_CREATE_QUEUE_EXT)
    if (plan->type == ThunkQueueType::sdma_by_eng_id)
      s = hsaKmtCreateQueueExt(static_cast<HSAuint32>(g.thunk_node), HSA_QUEUE_SDMA_BY_ENG_ID, 100,
                               HSA_QUEUE_PRIORITY_NORMAL, plan->sdma_engine_id, ring.ptr, ring.size, nullptr,
                               qr.get());
    else
#endif
      s = hsaKmtCreateQueue(static_cast<HSAuint32>(g.thunk_node), static_cast<HSA_QUEUE_TYPE>(static_cast<uint32_t>(plan->type)), 100,
                            HSA_QUEUE_PRIORITY_NORMAL, ring.ptr, ring.size, nullptr, qr.get());
    e = errno;
    if (s != HSAKMT_STATUS_SUCCESS) {
      event.reset();
      release_memory();
      return queue_create_error(s, e, g, engine, *plan);
    }
    // SDMA queues: the thunk supplies rptr/wptr (in its own page-sized,
    // uncached, GPU-mapped struct queue) and the doorbell; on gfx9+ all
    // three are 64-bit byte offsets (libhsakmt src/queues.c).
    uint64_t* rptr = qr->Queue_read_ptr_aql;
    uint64_t* wptr = qr->Queue_write_ptr_aql;
    uint64_t* doorbell = qr->Queue_DoorBell_aql;
    if (!rptr || !wptr || !doorbell) {
      hsaKmtDestroyQueue(qr->QueueId);
      event.reset();
      release_memory();
      return error(Code::internal, "libhsakmt created a queue on gpu " + std::to_string(gpu) +
                                       " without read/write pointers or a doorbell; please report with `sdma-probe "
                                       "list --backend kfd` output");
    }
    RingMemory rm{static_cast<uint32_t*>(ring.ptr), ring.size, rptr, wptr, static_cast<uint32_t*>(done.ptr),
                  reinterpret_cast<uint64_t>(done.ptr)};
    auto backend = std::make_unique<KfdQueueBackend>(ctx_, gpu, ring, done, std::move(event), qr->QueueId,
                                                     reinterpret_cast<volatile uint64_t*>(doorbell), rptr,
                                                     plan->placement);
    const Isa isa = Isa::sdma_gen(g.gen);
    Caps qcaps = caps(isa);
    qcaps.atomic64 = g.host_atomics64();  // SdmaQueue refuses ATOMICs where the CPU link lacks them
    return std::unique_ptr<Queue>(
        new SdmaQueue(gpu, engine, isa, qcaps, rm, std::move(frame).value(), std::move(backend)));
  }

 private:
  enum class Origin : uint8_t { allocated, registered, imported };
  struct Alloc {
    Origin origin = Origin::allocated;
    MemKind kind = MemKind::host;
    int gpu = -1;
    void* ptr = nullptr;   // what the thunk knows (CPU address or VA)
    size_t size = 0;       // whole allocation / registration
    uint64_t va = 0;       // GPU VA of ptr
    void* host = nullptr;  // CPU address of ptr, or null
    bool mapped = false;   // ours to unmap
    std::vector<int> mapped_gpus;
  };

  // Memory of the slot's window: every buffer of a device with a process
  // slot, so that any of them can be shared. A device peer that refuses the
  // mapping leaves the buffer to its own GPU, as alloc() does.
  Result<Buffer> alloc_shareable(int gpu, size_t bytes, MemKind kind) {
    const bool device = kind == MemKind::device;
    if (device) CONCCL_RETURN_IF_ERROR(check_gpu(gpu, "alloc"));
    const std::vector<int> targets = map_targets(ctx_->topo, device ? MemUse::device : MemUse::host, device ? gpu : -1);
    Result<Buffer> b = shared_->alloc(device ? gpu : -1, bytes, kind, targets);
    if (!b.ok() && device && targets.size() > 1 && b.status().code() != Code::resource_exhausted) {
      Result<Buffer> own = shared_->alloc(gpu, bytes, kind, {gpu});
      if (own.ok()) return own;
    }
    return b;
  }

  Status share_refusal(const char* call) const {
    if (slot_ < 0)
      return error(Code::invalid_argument, std::string(call) +
                                               ": this kfd device was opened without DeviceOptions::process_slot; "
                                               "open it with one (0..15, distinct per process: the rank) to share memory");
    return share_off_;
  }

  Status check_gpu(int gpu, const char* what) const {
    const int n = static_cast<int>(ctx_->topo.gpus.size());
    if (gpu < 0 || gpu >= n)
      return error(Code::invalid_argument, std::string(what) + " on gpu " + std::to_string(gpu) +
                                               ": this machine has GPUs 0.." + std::to_string(n - 1));
    return Status();
  }

  Status pending_fault(int gpu) const {
    const std::string f = ctx_->fault_for(gpu);
    if (f.empty()) return Status();
    return error(Code::device_fault, "gpu " + std::to_string(gpu) + ": " + f);
  }

  std::vector<uint32_t> thunk_nodes(const std::vector<int>& gpus) const {
    std::vector<uint32_t> out;
    for (int g : gpus) out.push_back(static_cast<uint32_t>(ctx_->topo.gpus[static_cast<size_t>(g)].thunk_node));
    return out;
  }

  int gpu_of_thunk_node(HSAuint32 node) const {
    for (const GpuNode& g : ctx_->topo.gpus)
      if (static_cast<HSAuint32>(g.thunk_node) == node) return g.index;
    return -1;
  }

  Result<Buffer> remember(const Alloc& a, size_t user_bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    Buffer b;
    b.va = a.va;
    b.host = a.host;
    b.size = user_bytes;
    b.gpu = a.gpu;
    b.kind = a.kind;
    // Imports get ids of their own: the same allocation may be imported
    // more than once (and may be one of ours).
    b.id = a.origin == Origin::imported ? kImportIdBit | next_import_id_++ : reinterpret_cast<uint64_t>(a.ptr);
    if (!allocs_.emplace(b.id, a).second)
      return error(Code::busy, "memory at " + hex(b.id) + " is already one of this device's buffers; free it first");
    return b;
  }

  static Status release(Alloc& a) {
    Status st;
    switch (a.origin) {
      case Origin::allocated: {
        Mapping m{a.ptr, a.size, a.mapped};
        st = m.release();
        break;
      }
      case Origin::registered:
        if (a.mapped && hsaKmtUnmapMemoryToGPU(a.ptr) != HSAKMT_STATUS_SUCCESS)
          st = error(Code::unavailable, "hsaKmtUnmapMemoryToGPU failed for registered memory at " + hex(a.va));
        if (hsaKmtDeregisterMemory(a.ptr) != HSAKMT_STATUS_SUCCESS && st.ok())
          st = error(Code::unavailable, "hsaKmtDeregisterMemory failed for " + hex(reinterpret_cast<uint64_t>(a.ptr)));
        break;
      case Origin::imported:
        break;  // its owner frees it
    }
    a.ptr = nullptr;
    return st;
  }

  // The internal queue fresh VRAM is zeroed through (zero_by()): created on
  // first use, engine 0 of the GPU, kept until the device closes.
  Result<Queue*> zero_queue(int gpu) {
    std::lock_guard<std::mutex> lock(utility_mu_);
    std::unique_ptr<Queue>& q = utility_[gpu];
    if (!q) {
      Result<std::unique_ptr<Queue>> made = create_queue(gpu, 0, QueueOptions{});
      if (!made.ok()) return made.status().prefix("the internal zero-fill queue on gpu " + std::to_string(gpu));
      q = std::move(made).value();
    }
    return q.get();
  }

  // CONSTANT_FILLs of zero over [va, va + bytes), then one wait for all of
  // them: the queue's completion ticket, sleeping on its wake-up, until a
  // deadline that grows with the size (sdma_zero_timeout). Queue::submit is
  // thread-safe, so concurrent allocations share the queue.
  static Status zero_with_sdma(Queue& q, uint64_t va, size_t bytes) {
    const Deadline deadline = Deadline::after(sdma_zero_timeout(bytes));
    constexpr uint64_t kChunk = uint64_t(1) << 30;  // keeps each command buffer well inside the ring
    QueueSpan span;
    for (uint64_t off = 0; off < bytes; off += kChunk) {
      const uint64_t len = std::min<uint64_t>(kChunk, bytes - off);
      CommandBuffer cb = q.command_buffer();
      CONCCL_RETURN_IF_ERROR(cb.fill(va + off, 0, len));
      if (off + len >= bytes) CONCCL_RETURN_IF_ERROR(q.record_wake(cb));
      CONCCL_RETURN_IF_ERROR(q.submit(cb, deadline, &span));
    }
    return q.wait_done(deadline, span.end);
  }

  static constexpr uint64_t kImportIdBit = uint64_t(1) << 63;  // never a user-space address
  std::shared_ptr<Context> ctx_;
  int slot_ = -1;
  std::unique_ptr<SharedMemory> shared_;
  Status share_off_;
  std::mutex mu_;  // guards allocs_, next_import_id_
  std::map<uint64_t, Alloc> allocs_;
  uint64_t next_import_id_ = 1;
  std::mutex utility_mu_;
  std::map<int, std::unique_ptr<Queue>> utility_;  // zero_queue(), per GPU
};

// Matches our GPUs to the thunk's node ids by DRM render minor (present in
// sysfs and in HsaNodeProperties of every thunk version).
Status match_thunk_nodes(const SysTopology& sys, const RenderAccess& access, KfdTopology& topo,
                         const std::string& device_path) {
  Out<HsaSystemProperties> sp;
  errno = 0;
  HSAKMT_STATUS s = hsaKmtAcquireSystemProperties(sp.get());
  int e = errno;
  if (s != HSAKMT_STATUS_SUCCESS)
    return thunk_error("hsaKmtAcquireSystemProperties", s, e,
                       "libhsakmt could not snapshot the KFD topology; if a GPU's /dev/dri/renderD* is not "
                       "accessible, add the user to the render and video groups");
  std::map<int, std::pair<uint32_t, std::pair<uint32_t, uint32_t>>> by_minor;  // minor -> node, (sdma, xgmi)
  for (HSAuint32 i = 0; i < sp->NumNodes; ++i) {
    Out<HsaNodeProperties> np;
    if (hsaKmtGetNodeProperties(i, np.get()) != HSAKMT_STATUS_SUCCESS) continue;
    if (np->NumFComputeCores == 0) continue;
    by_minor[np->DrmRenderMinor] = {i, {np->NumSdmaEngines, np->NumSdmaXgmiEngines}};
  }
  bool all = true;
  for (const GpuNode& g : topo.gpus) all = all && by_minor.count(g.drm_render_minor);
  if (!all) {
    // The thunk hides some GPU we saw: rebuild with its view.
    RenderAccess thunk_view = [&](int minor) { return by_minor.count(minor) ? access(minor) : ENOENT; };
    Result<KfdTopology> again = build_topology(sys, thunk_view);
    if (!again.ok()) return again.status().prefix("libhsakmt on " + device_path);
    topo = std::move(again).value();
  }
  for (GpuNode& g : topo.gpus) {
    const auto& [node, engines] = by_minor[g.drm_render_minor];
    g.thunk_node = static_cast<int>(node);
    if (static_cast<int>(engines.first) != g.num_sdma || static_cast<int>(engines.second) != g.num_xgmi)
      topo.topology.notes.push_back("gpu " + std::to_string(g.index) + ": libhsakmt reports " +
                                    std::to_string(engines.first) + "+" + std::to_string(engines.second) +
                                    " SDMA engines, sysfs " + std::to_string(g.num_sdma) + "+" +
                                    std::to_string(g.num_xgmi) + "; using sysfs");
  }
  return Status();
}

// Is a libhsa-runtime64 in the process, and does it use our libhsakmt? Up to
// ROCm 6.2 (and Debian's 5.2.3) it links libhsakmt.so.1, so its hsaKmt*
// resolve to the same functions as ours; from ROCm 6.3 the thunk is a static
// library inside it (ROCR-Runtime libhsakmt/CMakeLists.txt, hsacore.so.def
// exports no hsaKmt*), a second copy with its own events page.
ThunkSharing detect_thunk_sharing() {
  ThunkSharing t;
  for (const char* name : {"libhsa-runtime64.so.1", "libhsa-runtime64.so"}) {
    void* h = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
    if (!h) continue;
    t.hsa_runtime_loaded = true;
    void* theirs = dlsym(h, "hsaKmtOpenKFD");
    t.hsa_runtime_private_thunk = theirs != reinterpret_cast<void*>(&hsaKmtOpenKFD);
    dlclose(h);
    break;
  }
  return t;
}

// The first signal event sets the process's events page in KFD. If another
// thunk copy set it already, KFD says EINVAL: TRAP wake-ups go off, with a
// note, instead of every queue creation failing.
void probe_events_page(Context& ctx) {
  if (!ctx.trap.trap_wakeups || ctx.topo.gpus.empty()) return;
  HsaEventDescriptor d;
  std::memset(&d, 0, sizeof d);
  d.EventType = HSA_EVENTTYPE_SIGNAL;
  d.NodeId = static_cast<HSAuint32>(ctx.topo.gpus[0].thunk_node);
  HsaEvent* ev = nullptr;
  errno = 0;
  const HSAKMT_STATUS s = hsaKmtCreateEvent(&d, false, false, &ev);
  const int e = errno;
  if (s == HSAKMT_STATUS_SUCCESS && ev) {
    hsaKmtDestroyEvent(ev);  // the page stays ours; queues create their own events
    return;
  }
  if (is_events_page_conflict(s, e)) ctx.trap = TrapDecision{false, kTrapOffConflict};
  // Any other failure shows up, with its cause, when a queue creates its event.
}

}  // namespace

Result<std::unique_ptr<KfdDevice>> open(const Options& opt) {
  // Our own check first, for a precise message (the thunk only says
  // KERNEL_IO_CHANNEL_NOT_OPENED).
  CONCCL_RETURN_IF_ERROR(probe_device_node(opt.device_path));
  Result<SysTopology> sys = read_sysfs(opt.sysfs_root);
  if (!sys.ok()) return sys.status();
  const RenderAccess access = default_render_access(opt.dri_dir);
  Result<KfdTopology> topo = build_topology(*sys, access);
  if (!topo.ok()) return topo.status();

  auto ctx = std::make_shared<Context>();
  // libhsakmt opens /dev/kfd itself, whatever opt.device_path says.
  CONCCL_RETURN_IF_ERROR(ctx->open(kDefaultDevicePath));
  Out<HsaVersionInfo> v;
  errno = 0;
  const HSAKMT_STATUS vs = hsaKmtGetVersion(v.get());
  if (vs != HSAKMT_STATUS_SUCCESS) return thunk_error("hsaKmtGetVersion", vs, errno, "");
  ctx->caps.kfd_major = v->KernelInterfaceMajorVersion;
  ctx->caps.kfd_minor = v->KernelInterfaceMinorVersion;
#if defined(CONCCL_HSAKMT_HAS_CREATE_QUEUE_EXT)
  ctx->caps.thunk_has_create_queue_ext = true;
#endif
  ctx->mode = decide_queue_mode(ctx->caps);
  if (opt.require_engine_ids && ctx->mode.mode != QueueMode::by_engine_id)
    return error(Code::unavailable, "queues cannot be pinned to engines here, and pinning was required: " +
                                        ctx->mode.reason);

  ctx->topo = std::move(topo).value();
  CONCCL_RETURN_IF_ERROR(match_thunk_nodes(*sys, access, ctx->topo, kDefaultDevicePath));
  for (size_t i = 0; i < ctx->topo.gpus.size(); ++i)
    ctx->topo.topology.gpus[i].per_queue_bytes = per_queue_bytes(ctx->mode.mode, ctx->topo.gpus[i].cwsr);
  std::vector<std::string>& notes = ctx->topo.topology.notes;
  notes.insert(notes.begin(), "queue mode: " + std::string(queue_mode_name(ctx->mode.mode)) + ": " + ctx->mode.reason);
  notes.insert(notes.begin() + 1, "KFD interface " + std::to_string(ctx->caps.kfd_major) + "." +
                                      std::to_string(ctx->caps.kfd_minor) + ", " + build_description());
  const char* env = std::getenv("CONCCL_KFD_TRAP");
  ctx->trap = decide_trap(opt.trap_wakeups, env ? env : "", detect_thunk_sharing());
  probe_events_page(*ctx);
  notes.insert(notes.begin() + 2, ctx->trap.reason);
  // The fault watch is a KFD event too: only where events are ours to create.
  if (ctx->trap.trap_wakeups) ctx->watch_faults();
  if (ctx->trap.trap_wakeups && !ctx->fault_watch())
    notes.push_back("could not create a KFD memory-fault event: engine faults show up as timeouts, not faults");
  if (!ctx->trap.trap_wakeups) {
    std::shared_ptr<SmiEvents> smi = opt.smi_events ? opt.smi_events : real_smi_events(kDefaultDevicePath);
    const std::string why = ctx->watch_faults_smi(*smi);
    notes.push_back(why.empty() ? "GPU faults and resets are watched through KFD's SMI event files (no events page)"
                                : why);
  }

  // A process slot: the window for shareable memory. Opened after the
  // thunk, which has acquired the GPUs' VMs for this process; our own
  // /dev/kfd descriptor then reaches the same KFD process.
  std::unique_ptr<SharedMemory> shared;
  Status share_off;
  if (opt.process_slot != -1) {
    Result<Window> w = slot_window(opt.process_slot);
    if (!w.ok()) return w.status();
    std::shared_ptr<ShareSys> sys = opt.share_sys ? opt.share_sys : real_share_sys(opt.dri_dir);
    share_off = sys->available();
    if (share_off.ok()) {
      ShareConfig sc;
      sc.slot = opt.process_slot;
      sc.kfd_path = opt.device_path;
      for (const GpuNode& g : ctx->topo.gpus) sc.gpus.push_back(ShareGpu{g.gpu_id, g.drm_render_minor});
      Result<std::unique_ptr<SharedMemory>> m = SharedMemory::open(std::move(sys), sc);
      if (!m.ok()) return m.status().prefix("open(kfd) with process_slot " + std::to_string(opt.process_slot));
      shared = std::move(m).value();
      notes.push_back("process_slot " + std::to_string(opt.process_slot) + ": buffers are shareable, in [" +
                      hex(w->base) + ", " + hex(w->end()) + ") (libdrm_amdgpu buffer objects imported into KFD)");
    } else {
      // Without libdrm_amdgpu the device still works; share/import say why not.
      notes.push_back("process_slot " + std::to_string(opt.process_slot) + ": memory cannot be shared: " +
                      share_off.message());
    }
  }
  return std::unique_ptr<KfdDevice>(
      new KfdDeviceImpl(std::move(ctx), opt.process_slot, std::move(shared), std::move(share_off)));
}

}  // namespace conccl::kfd
