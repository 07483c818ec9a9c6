// src/backends/kfd/policy.cpp - the KFD backend's decisions that need no
// driver: queue mode per KFD version and thunk capability, queue type per
// engine, memory flags per use, which GPUs a buffer is mapped to, and how
// thunk/kernel errors become Status. Compiled and tested everywhere.
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "commands/lowering.hpp"
#include "conccl/sdma_packets.hpp"
#include "backends/kfd/kfd_policy.hpp"
#include "queue/sdma_frame.hpp"

namespace conccl::kfd {

namespace {

std::string errno_text(int err) {
  if (err == 0) return "no errno";
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

std::string engine_ranges(const GpuNode& g) {
  std::string s = "engines 0.." + std::to_string(g.engine_count() - 1) + " (" + std::to_string(g.num_sdma) + " PCIe";
  if (g.num_sdma > 0) s += ": 0-" + std::to_string(g.num_sdma - 1);
  s += ", " + std::to_string(g.num_xgmi) + " xGMI";
  if (g.num_xgmi > 0) s += ": " + std::to_string(g.num_sdma) + "-" + std::to_string(g.engine_count() - 1);
  return s + ")";
}

}  // namespace

// ---------------------------------------------------------------------------
// queue mode and queue type

const char* queue_mode_name(QueueMode m) {
  return m == QueueMode::by_engine_id ? "by-engine-id" : "kernel-chooses";
}

const char* thunk_queue_type_name(ThunkQueueType t) {
  switch (t) {
    case ThunkQueueType::sdma: return "HSA_QUEUE_SDMA";
    case ThunkQueueType::sdma_xgmi: return "HSA_QUEUE_SDMA_XGMI";
    case ThunkQueueType::sdma_by_eng_id: return "HSA_QUEUE_SDMA_BY_ENG_ID";
  }
  return "?";
}

QueueModeDecision decide_queue_mode(const Capabilities& c) {
  QueueModeDecision d;
  const std::string kfd = c.kfd_major == 0 ? std::string("unknown")
                                           : std::to_string(c.kfd_major) + "." + std::to_string(c.kfd_minor);
  const bool kfd_ok = c.kfd_major > 1 || (c.kfd_major == 1 && c.kfd_minor >= kKfdMinorByEngineId);
  if (!c.thunk_has_create_queue_ext) {
    d.reason = "this build's libhsakmt has no hsaKmtCreateQueueExt/HSA_QUEUE_SDMA_BY_ENG_ID (added in ROCm 6.3), so "
               "queues are created as HSA_QUEUE_SDMA (PCIe engines) or HSA_QUEUE_SDMA_XGMI (xGMI engines) and KFD "
               "puts each on the next free slot of that pool (KFD interface " + kfd +
               "); rebuild against ROCm >= 6.3's libhsakmt";
    if (!kfd_ok) d.reason += " on a kernel with KFD >= 1.17 (Linux >= 6.12 or ROCm's amdgpu-dkms >= 6.3)";
    d.reason += " to pin queues to engines";
    return d;
  }
  if (!kfd_ok) {
    d.reason = "the kernel's KFD interface is " + kfd +
               ", older than 1.17, which added SDMA queues on a chosen engine: queues are created as HSA_QUEUE_SDMA / "
               "HSA_QUEUE_SDMA_XGMI and KFD puts each on the next free slot of that pool; update to Linux >= 6.12 "
               "or ROCm's amdgpu-dkms >= 6.3 to pin queues to engines";
    return d;
  }
  d.mode = QueueMode::by_engine_id;
  d.reason = "KFD interface " + kfd +
             " (>= 1.17) and libhsakmt with hsaKmtCreateQueueExt: each queue is created with "
             "HSA_QUEUE_SDMA_BY_ENG_ID on exactly the engine asked for";
  return d;
}

Result<QueuePlan> plan_queue(QueueMode mode, const GpuNode& g, int engine, Options::Pin pin) {
  if (engine < 0 || engine >= g.engine_count())
    return error(Code::invalid_argument, "engine " + std::to_string(engine) + " is out of range: gpu " +
                                             std::to_string(g.index) + " (" + g.gfx + ") has " + engine_ranges(g));
  QueuePlan p;
  // Where ROCr leaves the engine to KFD (rocr-runtime
  // core/runtime/amd_gpu_agent.cpp, where it sets rec_eng = -1), so do we:
  //  - gfx9 below gfx90a (MI25/MI50/MI100): "strange behavior" when fixing
  //    engines there - never pinned, whatever `pin` says;
  //  - GPUs without xGMI engines (Radeon/RDNA): "resources are limited" (each
  //    pinned queue costs the thunk a CWSR area and an EOP buffer) - unless
  //    pinning is asked for (Options::pin_engines = on).
  const bool old_gfx9 = g.gfx_target_version >= 90000 && g.gfx_target_version < 90010;
  if (mode == QueueMode::by_engine_id) {
    if (old_gfx9) {
      mode = QueueMode::kernel_chooses;
      p.placement = g.gfx + " (gfx9 below gfx90a) is not pinned, as ROCr does not pin it: ";
    } else if (pin == Options::Pin::off) {
      mode = QueueMode::kernel_chooses;
      p.placement = "not pinned (pin_engines=off): ";
    } else if (pin == Options::Pin::auto_ && g.num_xgmi == 0) {
      mode = QueueMode::kernel_chooses;
      p.placement = g.gfx + " has no xGMI engines, so its queues are not pinned, as ROCr does not pin them "
                    "(pin_engines=on pins them, at a CWSR area per queue): ";
    }
  }
  if (mode == QueueMode::by_engine_id) {
    p.type = ThunkQueueType::sdma_by_eng_id;
    p.sdma_engine_id = static_cast<uint32_t>(engine);
    p.pinned = true;
    p.placement = "engine " + std::to_string(engine) + " (pinned with HSA_QUEUE_SDMA_BY_ENG_ID)";
    return p;
  }
  const bool pcie = engine < g.num_sdma;
  p.type = pcie ? ThunkQueueType::sdma : ThunkQueueType::sdma_xgmi;
  const int first = pcie ? 0 : g.num_sdma;
  const int count = pcie ? g.num_sdma : g.num_xgmi;
  p.placement += std::string("a ") + (pcie ? "PCIe" : "xGMI") + " engine chosen by KFD (" +
                thunk_queue_type_name(p.type) + ": first free slot of engines " + std::to_string(first) + "-" +
                std::to_string(first + count - 1) + ", round-robin), not necessarily engine " + std::to_string(engine);
  return p;
}

Status check_ring_bytes(size_t bytes) {
  if (bytes < 4096 || (bytes & (bytes - 1)) || bytes > (size_t(1) << 30))
    return error(Code::invalid_argument,
                 "ring size " + std::to_string(bytes) +
                     " must be a power of two from 4096 to 1 GiB (KFD rejects other sizes: \"Ring size must be a "
                     "power of 2\")");
  return Status();
}

// ---------------------------------------------------------------------------
// memory flags

uint32_t MemFlags::bits() const {
  // hsakmttypes.h HsaMemFlags, LSB first: NonPaged:1 CachePolicy:2 ReadOnly:1
  // PageSize:2 HostAccess:1 NoSubstitute:1 GDSMemory:1 Scratch:1
  // AtomicAccessFull:1 AtomicAccessPartial:1 ExecuteAccess:1 CoarseGrain:1
  // AQLQueueMemory:1 FixedAddress:1 NoNUMABind:1 Uncached:1 (5.2.3 and later).
  uint32_t v = 0;
  v |= uint32_t(non_paged) << 0;
  v |= uint32_t(cache_policy & 3) << 1;
  v |= uint32_t(read_only) << 3;
  v |= uint32_t(page_size & 3) << 4;
  v |= uint32_t(host_access) << 6;
  v |= uint32_t(no_substitute) << 7;
  v |= uint32_t(execute_access) << 12;
  v |= uint32_t(coarse_grain) << 13;
  v |= uint32_t(no_numa_bind) << 16;
  v |= uint32_t(uncached) << 17;
  return v;
}

std::string MemFlags::describe() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (on) s += (s.empty() ? "" : " ") + std::string(name);
  };
  add(non_paged, "NonPaged");
  add(read_only, "ReadOnly");
  add(host_access, "HostAccess");
  add(no_substitute, "NoSubstitute");
  add(execute_access, "ExecuteAccess");
  add(coarse_grain, "CoarseGrain");
  add(no_numa_bind, "NoNUMABind");
  add(uncached, "Uncached");
  s += (s.empty() ? "" : " ") + std::string("PageSize=") + (page_size == 0 ? "4KB" : std::to_string(page_size));
  return s;
}

const char* mem_use_name(MemUse u) {
  switch (u) {
    case MemUse::ring: return "ring";
    case MemUse::host: return "host";
    case MemUse::device: return "device";
    case MemUse::device_hidden: return "device (no CPU mapping)";
  }
  return "?";
}

namespace {

// System memory the CPU writes and the engines read (or the other way round),
// fine-grained and GPU-uncached: the ring's and host buffers' flags.
//  - NonPaged=0 on a GPU node: libhsakmt allocates anonymous memory and
//    wraps it in a userptr BO (fmm.c fmm_allocate_host_gpu), a GPUVM
//    mapping of exactly the ring's size, which is what KFD >= 6.12
//    requires of a ring ("validate user queue buffers").
//  - CoarseGrain=0 -> KFD_IOC_ALLOC_MEM_FLAGS_COHERENT and Uncached=1
//    -> ..._UNCACHED: the engine's fetches are never served from a stale
//    GPU cache line, so packets written by the CPU are seen as soon as
//    wptr moves (ROCr's BlitSdma ring comes from its uncached kernarg
//    pool for the same reason).
//  - NoNUMABind: no mbind failures on single-node or memory-less NUMA
//    layouts (kfdtest sets it).
void set_coherent_host(MemFlags& f) {
  f.host_access = true;
  f.non_paged = false;
  f.coarse_grain = false;
  f.uncached = true;
  f.no_numa_bind = true;
}

}  // namespace

MemFlags mem_flags_for(MemUse use) {
  MemFlags f;
  f.page_size = 0;  // HSA_PAGE_SIZE_4KB
  switch (use) {
    case MemUse::ring:
      // kfdtest's queue buffer (BaseQueue.cpp + KFDTestUtil.cpp
      // HsaMemoryBuffer(isLocal=false, isExec=true, isUncached=true)), which
      // AMD DMA-Latte copies: system memory the CPU writes packets into.
      // ExecuteAccess: queue memory (hsakmttypes.h: "used for executable
      // code (e.g. queue memory)").
      set_coherent_host(f);
      f.execute_access = true;
      break;
    case MemUse::host:
      // Host buffers hold signals the CPU and compute kernels poll and data
      // the CPU reads back right after an engine wrote it. Fine-grained
      // (COHERENT) and GPU-uncached like the ring, so a kernel polling a
      // signal never spins on a stale L2 line (ROCr's signal/kernarg memory
      // is Uncached too). The CPU side stays ordinary cached memory.
      set_coherent_host(f);
      break;
    case MemUse::device:
    case MemUse::device_hidden:
      // VRAM: NonPaged=1 on a GPU node is what routes hsaKmtAllocMemory to
      // VRAM (memory.c). HostAccess asks for a CPU mapping through the BAR
      // (KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC), which fails past the visible window
      // on small-BAR systems; then device_hidden retries without it.
      // CoarseGrain=1 is hipMalloc's default (kfdtest's local buffers too):
      // SDMA copies do not depend on it and compute kernels keep their L2.
      // NoSubstitute: never fall back to system memory silently.
      f.non_paged = true;
      f.host_access = use == MemUse::device;
      f.coarse_grain = true;
      f.no_substitute = true;
      break;
  }
  return f;
}

std::vector<int> map_targets(const KfdTopology& t, MemUse use, int owner) {
  std::vector<int> out;
  const int n = static_cast<int>(t.gpus.size());
  if (use == MemUse::host) {
    for (int g = 0; g < n; ++g) out.push_back(g);
    return out;
  }
  if (owner < 0 || owner >= n) return out;
  out.push_back(owner);
  if (use == MemUse::ring) return out;
  // Every GPU that has a link to the owner, in either direction (links are
  // listed only where peer DMA is possible).
  for (int g = 0; g < n; ++g) {
    if (g == owner) continue;
    const GpuInfo& other = t.topology.gpus[static_cast<size_t>(g)];
    const GpuInfo& mine = t.topology.gpus[static_cast<size_t>(owner)];
    if (other.link_to(owner) || mine.link_to(g)) out.push_back(g);
  }
  return out;
}

// ---------------------------------------------------------------------------
// errors

const char* kmt_status_name(int s) {
  switch (static_cast<KmtStatus>(s)) {
    case KmtStatus::success: return "HSAKMT_STATUS_SUCCESS";
    case KmtStatus::error: return "HSAKMT_STATUS_ERROR";
    case KmtStatus::driver_mismatch: return "HSAKMT_STATUS_DRIVER_MISMATCH";
    case KmtStatus::invalid_parameter: return "HSAKMT_STATUS_INVALID_PARAMETER";
    case KmtStatus::invalid_handle: return "HSAKMT_STATUS_INVALID_HANDLE";
    case KmtStatus::invalid_node_unit: return "HSAKMT_STATUS_INVALID_NODE_UNIT";
    case KmtStatus::no_memory: return "HSAKMT_STATUS_NO_MEMORY";
    case KmtStatus::buffer_too_small: return "HSAKMT_STATUS_BUFFER_TOO_SMALL";
    case KmtStatus::not_implemented: return "HSAKMT_STATUS_NOT_IMPLEMENTED";
    case KmtStatus::not_supported: return "HSAKMT_STATUS_NOT_SUPPORTED";
    case KmtStatus::unavailable: return "HSAKMT_STATUS_UNAVAILABLE";
    case KmtStatus::out_of_resources: return "HSAKMT_STATUS_OUT_OF_RESOURCES";
    case KmtStatus::kernel_io_channel_not_opened: return "HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED";
    case KmtStatus::kernel_communication_error: return "HSAKMT_STATUS_KERNEL_COMMUNICATION_ERROR";
    case KmtStatus::kernel_already_opened: return "HSAKMT_STATUS_KERNEL_ALREADY_OPENED";
    case KmtStatus::hsammu_unavailable: return "HSAKMT_STATUS_HSAMMU_UNAVAILABLE";
    case KmtStatus::wait_failure: return "HSAKMT_STATUS_WAIT_FAILURE";
    case KmtStatus::wait_timeout: return "HSAKMT_STATUS_WAIT_TIMEOUT";
    case KmtStatus::memory_already_registered: return "HSAKMT_STATUS_MEMORY_ALREADY_REGISTERED";
    case KmtStatus::memory_not_registered: return "HSAKMT_STATUS_MEMORY_NOT_REGISTERED";
    case KmtStatus::memory_alignment: return "HSAKMT_STATUS_MEMORY_ALIGNMENT";
  }
  return "HSAKMT_STATUS_<unknown>";
}

namespace {

std::string group_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  if (const group* g = ::getgrgid(st.st_gid)) return g->gr_name;
  return "gid " + std::to_string(st.st_gid);
}

std::string status_text(int status, int saved_errno) {
  std::string s = kmt_status_name(status);
  if (saved_errno) s += ", " + errno_text(saved_errno);
  return s;
}

}  // namespace

Status open_error(int err, const std::string& path) {
  switch (err) {
    case 0: return Status();
    case ENOENT:
      return error(Code::unavailable,
                   "no " + path +
                       ": the amdgpu kernel driver's KFD interface is not present (no AMD GPU, amdgpu not loaded, or a "
                       "container started without the device); load amdgpu (modprobe amdgpu) or install ROCm's "
                       "amdgpu-dkms, and start containers with --device=/dev/kfd --device=/dev/dri");
    case EACCES:
    case EPERM: {
      const std::string grp = group_of(path);
      return error(Code::unavailable,
                   "permission denied opening " + path + (grp.empty() ? "" : " (group '" + grp + "')") +
                       ": add the user to the render and video groups (sudo usermod -aG render,video $USER, then "
                       "log in again); in a container pass --device=/dev/kfd --device=/dev/dri and --group-add "
                       "render, or check the device cgroup");
    }
    case ENODEV:
    case ENXIO:
      return error(Code::unavailable, path + " exists but no driver answers behind it (" + errno_text(err) +
                                          "): the amdgpu module failed to initialise the GPU; see dmesg");
    default:
      return error(Code::unavailable, "cannot open " + path + ": " + errno_text(err));
  }
}

Status probe_device_node(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return open_error(errno, path);
  ::close(fd);
  return Status();
}

Status thunk_error(const std::string& call, int status, int saved_errno, const std::string& fix) {
  const std::string what = call + " failed: " + status_text(status, saved_errno) + (fix.empty() ? "" : "; " + fix);
  switch (static_cast<KmtStatus>(status)) {
    case KmtStatus::success:
    case KmtStatus::kernel_already_opened:
      return Status();
    case KmtStatus::no_memory:
    case KmtStatus::out_of_resources:
      return error(Code::resource_exhausted, what);
    case KmtStatus::invalid_parameter:
    case KmtStatus::invalid_handle:
    case KmtStatus::invalid_node_unit:
    case KmtStatus::memory_alignment:
    case KmtStatus::buffer_too_small:
      return error(Code::invalid_argument, what);
    case KmtStatus::memory_already_registered:
      return error(Code::busy, what);
    case KmtStatus::memory_not_registered:
      return error(Code::not_found, what);
    case KmtStatus::wait_timeout:
      return error(Code::timeout, what);
    case KmtStatus::driver_mismatch:
    case KmtStatus::not_implemented:
    case KmtStatus::not_supported:
    case KmtStatus::unavailable:
    case KmtStatus::kernel_io_channel_not_opened:
    case KmtStatus::hsammu_unavailable:
      return error(Code::unavailable, what);
    default:
      break;
  }
  // HSAKMT_STATUS_ERROR and friends: libhsakmt 5.2.3 reports every failed
  // ioctl this way; errno still holds the kernel's reason.
  switch (saved_errno) {
    case ENOMEM:
    case ENOSPC: return error(Code::resource_exhausted, what);
    case EINVAL:
    case EFAULT: return error(Code::invalid_argument, what);
    case EACCES:
    case EPERM: return error(Code::unavailable, what);
    case EBUSY: return error(Code::busy, what);
    case ETIME:
    case ETIMEDOUT: return error(Code::timeout, what);
    default: return error(Code::unavailable, what);
  }
}

Status queue_create_error(int status, int saved_errno, const GpuNode& g, int engine, const QueuePlan& plan) {
  const std::string call = plan.type == ThunkQueueType::sdma_by_eng_id ? "hsaKmtCreateQueueExt" : "hsaKmtCreateQueue";
  const std::string what = call + "(" + thunk_queue_type_name(plan.type) + ") for gpu " + std::to_string(g.index) +
                           " engine " + std::to_string(engine) + " failed: " + status_text(status, saved_errno);
  const bool no_memory = static_cast<KmtStatus>(status) == KmtStatus::no_memory ||
                         static_cast<KmtStatus>(status) == KmtStatus::out_of_resources ||
                         saved_errno == ENOMEM || saved_errno == ENOSPC;
  if (no_memory) {
    std::string where = plan.pinned ? "engine " + std::to_string(engine) + " of gpu " + std::to_string(g.index)
                                    : std::string(plan.type == ThunkQueueType::sdma ? "the PCIe" : "the xGMI") +
                                          " engine pool of gpu " + std::to_string(g.index);
    const std::string slots = g.queues_per_engine > 0 ? std::to_string(g.queues_per_engine) : "a few";
    return error(Code::resource_exhausted,
                 what + ": no free SDMA queue slot on " + where + ". KFD has " + slots +
                     " queues per engine, shared by every process on the machine (ROCr/HIP keep some for their own "
                     "copies; dmesg says \"No more SDMA queue to allocate\"). Destroy queues you no longer need, "
                     "reuse queues instead of creating one per transfer, or use another engine");
  }
  if (static_cast<KmtStatus>(status) == KmtStatus::invalid_parameter || saved_errno == EINVAL)
    return error(Code::invalid_argument,
                 what + ": KFD rejected the queue's parameters (engine id beyond what the kernel allows, ring size "
                        "not a power of two, or a ring that is not its own GPU mapping); check `sdma-probe list "
                        "--backend kfd` for this GPU's engines");
  if (static_cast<KmtStatus>(status) == KmtStatus::error && saved_errno == 0)
    return error(Code::resource_exhausted,
                 what + ": libhsakmt gave no reason (older thunks report every kernel error as HSAKMT_STATUS_ERROR); "
                        "the usual cause is that the engine's queue slots are taken (dmesg: \"No more SDMA queue to "
                        "allocate\"): destroy unused queues or use another engine");
  return thunk_error(call, status, saved_errno, "queue on gpu " + std::to_string(g.index) + ", " + plan.placement);
}

Status open_kfd_error(int status, int saved_errno, const std::string& device_path) {
  switch (static_cast<KmtStatus>(status)) {
    case KmtStatus::success:
    case KmtStatus::kernel_already_opened:
      return Status();
    case KmtStatus::kernel_io_channel_not_opened:
      return open_error(saved_errno ? saved_errno : ENOENT, device_path);
    case KmtStatus::driver_mismatch:
      return error(Code::unavailable,
                   "hsaKmtOpenKFD: the kernel's KFD interface major version is not 1, which libhsakmt requires "
                   "(HSAKMT_STATUS_DRIVER_MISMATCH); install a ROCm userspace that matches the kernel driver");
    default:
      return thunk_error("hsaKmtOpenKFD", status, saved_errno,
                         "libhsakmt opened " + device_path +
                             " but could not read the KFD topology; if a render node is not accessible (EACCES), "
                             "add the user to the render and video groups");
  }
}

uint32_t wait_slice_ms(std::chrono::nanoseconds remaining, uint32_t max_ms) {
  const int64_t ns = remaining.count();
  if (ns <= 0) return 1;
  const int64_t ms = (ns + 999999) / 1000000;
  if (ms > max_ms) return max_ms;
  return ms < 1 ? 1 : static_cast<uint32_t>(ms);
}

Status record_wake(CommandBuffer& cb, uint32_t event_id, uint64_t mailbox_va) {
  SdmaPackets pk(cb);
  return lower::all_or_nothing(cb, [&]() -> Status {
    // GL2 written back before the mailbox FENCE (uncached) that wakes the host,
    // as before any signal (src/commands/lower_sdma.cpp; ROCr amd_blit_sdma.cpp).
    if (cb.isa().is_sdma() && sdma::limits(cb.gen()).has_gcr) {
      const sdma::FieldValue f[] = {{sdma::Key::control, kGcrWriteBack}};
      CONCCL_RETURN_IF_ERROR(pk.packet(sdma::Pkt::gcr_user, f));
    }
    if (mailbox_va != 0) CONCCL_RETURN_IF_ERROR(pk.fence(mailbox_va, event_id));
    return pk.trap(event_id);
  });
}

Status record_wake_rocr(CommandBuffer& cb, uint64_t value_va, uint32_t event_id, uint64_t mailbox_va) {
  SdmaPackets pk(cb);
  return lower::all_or_nothing(cb, [&]() -> Status {
    CONCCL_RETURN_IF_ERROR(pk.atomic_add64(value_va, 1));
    if (mailbox_va == 0) return Status();  // no interrupt: a waiter sees the value change
    return record_wake(cb, event_id, mailbox_va);
  });
}

// ---------------------------------------------------------------------------
// events page ownership (one per process: linux amdkfd kfd_events.c)

TrapDecision decide_trap(Options::Trap opt, const std::string& env, const ThunkSharing& t) {
  if (env == "0") return {false, "TRAP wake-ups off (CONCCL_KFD_TRAP=0): waits poll with naps"};
  if (env == "1") return {true, "TRAP wake-ups on (CONCCL_KFD_TRAP=1)"};
  if (opt == Options::Trap::off) return {false, "TRAP wake-ups off (kfd::Options::trap_wakeups): waits poll with naps"};
  if (opt == Options::Trap::on) return {true, "TRAP wake-ups on (kfd::Options::trap_wakeups)"};
  if (t.hsa_runtime_loaded && t.hsa_runtime_private_thunk)
    return {false,
            "TRAP wake-ups off: libhsa-runtime64 in this process carries its own libhsakmt (ROCm >= 6.3) and KFD "
            "gives a process one events page, so ConCCL's events would take HIP's wake-ups or be refused; waits poll "
            "with naps (CONCCL_KFD_TRAP=1 forces them on)"};
  if (t.hsa_runtime_loaded)
    return {true, "TRAP wake-ups on: one libhsakmt shared with libhsa-runtime64 (one events page for both)"};
  // Issue #31, item 1: creating any event here would take KFD's one events page
  // from a HIP that initialises later in this process (ROCm >= 6.3), whose
  // first event would fail and whose waits would hang.
  return {false,
          "TRAP wake-ups and fault reports off: no KFD event is created by default, since KFD gives a process one "
          "events page and a HIP initialised later in this process (ROCm >= 6.3) would find it taken; waits poll "
          "with naps, faults show as timeouts. In processes that never load HIP, CONCCL_KFD_TRAP=1 (or "
          "kfd::Options::trap_wakeups = on) turns both on"};
}

bool is_events_page_conflict(int status, int saved_errno) {
  return (status == static_cast<int>(KmtStatus::error) && saved_errno == EINVAL) ||
         status == static_cast<int>(KmtStatus::invalid_parameter);
}

ZeroBy zero_by(MemUse use, size_t bytes) {
  switch (use) {
    case MemUse::device_hidden: return ZeroBy::sdma;  // the CPU cannot reach it
    case MemUse::device: return bytes >= kSdmaZeroMinBytes ? ZeroBy::sdma : ZeroBy::cpu;
    case MemUse::ring:
    case MemUse::host: return ZeroBy::cpu;
  }
  return ZeroBy::cpu;
}

std::chrono::milliseconds sdma_zero_timeout(size_t bytes) {
  return std::chrono::milliseconds(30000 + static_cast<int64_t>(bytes >> 30) * 1000);
}

}  // namespace conccl::kfd
