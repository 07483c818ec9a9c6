// src/backends/kfd/kfd_device.cpp - the thin layer that calls libhsakmt.
//
// Everything that can be decided without the thunk lives in sysfs.cpp and
// policy.cpp; this file only turns those decisions into hsaKmt* calls:
// open, memory (alloc, register, import, map) and SDMA queues. What the
// device shares with its queues and events (the open thunk, the fault
// watch, signal events, the topology snapshot) is kfd_context.cpp; one
// queue's ring, doorbell and TRAP event kfd_queue_backend.hpp.
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

#include "backends/registry.hpp"
#include "backends/kfd/kfd_context.hpp"
#include "backends/kfd/kfd_queue_create.hpp"
#include "backends/kfd/kfd_policy.hpp"
#include "backends/kfd/kfd_share.hpp"
#include "backends/kfd/kfd_smi.hpp"
#include "backends/kfd/rocr_wake.hpp"
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

using namespace detail;

namespace {

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
    if (kind == MemKind::cuda) return no_cuda_memory("kfd");
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
    return shared_->share(b.va, b.size, fd);  // node_gpu_id: the gpu_id of the GPU holding the buffer object
  }

  Status import_shared(const SharedRegion& r, int fd) override {
    if (!shared_) {
      if (fd >= 0) ::close(fd);  // ours, whatever happens
      return share_refusal("import_shared");
    }
    // Mapped as this process maps its own memory of that kind: host memory
    // to every GPU, VRAM to its GPU and that GPU's peers. VRAM of a GPU this
    // process does not see (per-rank isolation) goes to all of ours.
    const bool device = r.kind == MemKind::device;
    int owner = device ? r.gpu : -1;
    if (device && r.node_gpu_id != 0) {
      const GpuInfo* g = ctx_->topo.topology.gpu_with_node_id(r.node_gpu_id);
      owner = g ? g->index : -1;
    } else if (device) {
      if (Status st = check_gpu(r.gpu, "import_shared"); !st.ok()) {
        if (fd >= 0) ::close(fd);
        return st;
      }
    }
    const bool hidden = device && owner < 0;
    return shared_->import(r, fd, map_targets(ctx_->topo, device && !hidden ? MemUse::device : MemUse::host, owner));
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
    CONCCL_RETURN_IF_ERROR(check_ring_bytes(opt.ring_bytes));
    if (Status st = pending_fault(gpu); !st.ok()) return st;
    return create_sdma_queue(ctx_, gpu, engine, opt);
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

// Issue #31, item 1: without KFD events of our own, host waits sleep on
// interrupt signals of the hsa-runtime in the process, where one is loaded
// (rocr_wake.hpp); CONCCL_KFD_ROCR_WAKE=0 turns that off. Sets ctx.rocr and
// returns the topology note that says which way waits sleep, or why they poll.
std::string open_rocr_wake(Context& ctx, const ThunkSharing& sharing) {
  const char* env = std::getenv("CONCCL_KFD_ROCR_WAKE");
  if (env && std::string(env) == "0")
    return "host waits poll with naps: waking through ROCr interrupt signals is off (CONCCL_KFD_ROCR_WAKE=0)";
  if (!sharing.hsa_runtime_loaded)
    return "host waits poll with naps: no libhsa-runtime64 in the process whose interrupt signals they could sleep on";
  std::string why;
  std::shared_ptr<RocrRuntime> rt = RocrRuntime::open(&why);
  if (!rt) return "host waits poll with naps: ROCr interrupt signals cannot be used: " + why;
  ctx.rocr = std::move(rt);
  std::string note = std::string("host waits sleep on ROCr interrupt signals (") +
                     (sharing.hsa_runtime_private_thunk ? "hsa-runtime in the process has its own libhsakmt"
                                                        : "hsa-runtime in the process; KFD events off") +
                     "): one signal per queue, raised by an SDMA ATOMIC add, its mailbox FENCE and TRAP";
  for (const GpuNode& g : ctx.topo.gpus)
    if (!g.host_atomics64())
      note += "; gpu " + std::to_string(g.index) +
              " polls with naps instead: its CPU link lacks 64-bit atomics (NO_ATOMICS_64) for the signal's add";
  return note;
}

}  // namespace

Result<std::unique_ptr<KfdDevice>> open(const Options& opt) {
  if (opt.require_engine_ids && opt.pin_engines == Options::Pin::off)
    return error(Code::invalid_argument,
                 "require_engine_ids=1 with pin_engines=off: pinning is both required and turned off; give one");
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
  ctx->pin = opt.require_engine_ids ? Options::Pin::on : opt.pin_engines;

  ctx->topo = std::move(topo).value();
  CONCCL_RETURN_IF_ERROR(match_thunk_nodes(*sys, access, ctx->topo, kDefaultDevicePath));
  for (size_t i = 0; i < ctx->topo.gpus.size(); ++i)
    ctx->topo.topology.gpus[i].per_queue_bytes = per_queue_bytes(ctx->mode.mode, ctx->topo.gpus[i].cwsr);
  std::vector<std::string>& notes = ctx->topo.topology.notes;
  notes.insert(notes.begin(), "queue mode: " + std::string(queue_mode_name(ctx->mode.mode)) + ": " + ctx->mode.reason);
  notes.insert(notes.begin() + 1, "KFD interface " + std::to_string(ctx->caps.kfd_major) + "." +
                                      std::to_string(ctx->caps.kfd_minor) + ", " + build_description());
  const char* env = std::getenv("CONCCL_KFD_TRAP");
  const ThunkSharing sharing = detect_thunk_sharing();
  ctx->trap = decide_trap(opt.trap_wakeups, env ? env : "", sharing);
  probe_events_page(*ctx);
  notes.insert(notes.begin() + 2, ctx->trap.reason);
  if (!ctx->trap.trap_wakeups) notes.push_back(open_rocr_wake(*ctx, sharing));
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
