// src/backends/kfd/kfd_share.cpp - the slot window and the life of shareable
// buffers and imports on the KFD backend (see kfd_share.hpp for the route).
// Pure logic over the ShareSys seam: compiled and tested on every machine.
#include "backends/kfd/kfd_share.hpp"

#include "backends/kfd/kfd_policy.hpp"  // open_error
#include "util/free_ranges.hpp"
#include "util/sanitizers.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

namespace conccl::kfd {


namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kHugePage = uint64_t(2) << 20;

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Serials are unique in the process, not just in one device: a device closed
// and opened again with the same slot hands out the same addresses, and an
// importer must still see new memory there as new.
std::atomic<uint64_t> g_next_serial{1};

std::string errno_text(int err) {
  const char* name = nullptr;
  switch (err) {
    case EPERM: name = "EPERM"; break;
    case ENOENT: name = "ENOENT"; break;
    case EINTR: name = "EINTR"; break;
    case EBADF: name = "EBADF"; break;
    case EAGAIN: name = "EAGAIN"; break;
    case ENOMEM: name = "ENOMEM"; break;
    case EACCES: name = "EACCES"; break;
    case EFAULT: name = "EFAULT"; break;
    case EBUSY: name = "EBUSY"; break;
    case EEXIST: name = "EEXIST"; break;
    case ENODEV: name = "ENODEV"; break;
    case EINVAL: name = "EINVAL"; break;
    case ENOTTY: name = "ENOTTY"; break;
    case ENOSPC: name = "ENOSPC"; break;
    case ENOSYS: name = "ENOSYS"; break;
    default: break;
  }
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + (name ? std::string(" ") + name : "") +
         ")";
}

}  // namespace

Result<Window> slot_window(int slot) {
  if (slot < 0 || slot >= kMaxProcessSlots)
    return error(Code::invalid_argument, "process_slot " + std::to_string(slot) + " must be 0.." +
                                             std::to_string(kMaxProcessSlots - 1) + " (or -1: one process)");
  return Window{kSlotWindowBase + static_cast<uint64_t>(slot) * kSlotWindowBytes, kSlotWindowBytes};
}

int slot_of(uint64_t va) {
  if (va < kSlotWindowBase) return -1;
  const uint64_t s = (va - kSlotWindowBase) / kSlotWindowBytes;
  return s < static_cast<uint64_t>(kMaxProcessSlots) ? static_cast<int>(s) : -1;
}

Status kfd_ioctl_error(const char* ioctl_name, int err, const std::string& what) {
  const std::string head = std::string(ioctl_name) + " failed for " + what + ": " + errno_text(err) + "; ";
  switch (err) {
    case ENOTTY:
      return error(Code::unavailable,
                   head + "this kernel's KFD does not have the ioctl (the kernel is too old): use Linux 6.1 or newer, "
                          "or ROCm's amdgpu-dkms");
    case ENOMEM:
    case ENOSPC:
      return error(Code::resource_exhausted, head + "the GPU or the system is out of memory: free buffers or allocate less");
    case EINVAL:
      return error(Code::invalid_argument,
                   head + "KFD refused the arguments: the dma-buf must be an amdgpu buffer of the GPU named, the GPU "
                          "must belong to this process (libhsakmt opened first), and the address must be free in its "
                          "GPUVM");
    case EFAULT:
      return error(Code::internal, head + "KFD could not read the arguments; please report this");
    case EBUSY:
      return error(Code::busy, head + "the memory is in use (mapped or in flight): wait for the GPU, then retry");
    default:
      return error(Code::unavailable, head + "see dmesg for the amdgpu driver's reason");
  }
}

SharedMemory::SharedMemory(std::shared_ptr<ShareSys> sys, ShareConfig config, Window window, int kfd_fd)
    : sys_(std::move(sys)), config_(std::move(config)), window_(window), kfd_fd_(kfd_fd) {
  free_[window_.base] = window_.bytes;
}

Result<std::unique_ptr<SharedMemory>> SharedMemory::open(std::shared_ptr<ShareSys> sys, const ShareConfig& config) {
  if (!sys) return error(Code::internal, "SharedMemory::open without its system calls");
  Result<Window> w = slot_window(config.slot);
  if (!w.ok()) return w.status();
  CONCCL_RETURN_IF_ERROR(sys->available());
  if (config.gpus.empty()) return error(Code::not_found, "shared memory on a device without GPUs");
  // The whole window, PROT_NONE and without memory behind it, so that no
  // other mapping of this process lands where our buffers will go.
  int err = 0;
  std::optional<uint64_t> at = sys->mmap(w->base, w->bytes, PROT_NONE,
                                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, &err);
  const std::string range = "[" + hex(w->base) + ", " + hex(w->end()) + ")";
  if (!at && util::kThreadSanitizer)
    return error(Code::unavailable, "reserving process_slot " + std::to_string(config.slot) + "'s address window " +
                                        range + ": this is a ThreadSanitizer build, and TSan keeps that range for its "
                                        "own shadow memory; run multi-process communicators from a build without TSan");
  if (!at) {
    if (err == EEXIST)
      return error(Code::busy, "process_slot " + std::to_string(config.slot) + "'s address window " + range +
                                   " is already in use in this process: another device opened with process_slot " +
                                   std::to_string(config.slot) +
                                   " is still open here, or something else is mapped there; close that device or "
                                   "give this one another slot");
    return error(Code::resource_exhausted, "reserving process_slot " + std::to_string(config.slot) +
                                               "'s address window " + range + ": " + errno_text(err) +
                                               "; check ulimit -v (the reservation takes address space, not memory)");
  }
  if (*at != w->base) {
    // Before Linux 4.17 MAP_FIXED_NOREPLACE was only a hint.
    (void)sys->munmap(*at, w->bytes);
    return error(Code::unavailable, "reserving process_slot " + std::to_string(config.slot) + "'s window at " +
                                        hex(w->base) + ": the kernel placed it at " + hex(*at) + " (it ignores MAP_FIXED_NOREPLACE: Linux < 4.17): use a newer kernel");
  }
  int fd = -1;
  err = sys->open_kfd(config.kfd_path, &fd);
  if (err != 0) {
    (void)sys->munmap(w->base, w->bytes);
    return open_error(err, config.kfd_path).prefix("shared memory of process_slot " + std::to_string(config.slot));
  }
  return std::unique_ptr<SharedMemory>(new SharedMemory(std::move(sys), config, *w, fd));
}

SharedMemory::~SharedMemory() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [va, m] : imported_) (void)detach(m, false);
  imported_.clear();
  for (auto& [va, m] : own_) (void)detach(m, true);
  own_.clear();
  (void)sys_->munmap(window_.base, window_.bytes);
  if (kfd_fd_ >= 0) (void)sys_->close(kfd_fd_);
}

Status SharedMemory::check_gpu(int gpu, const char* what) const {
  const int n = static_cast<int>(config_.gpus.size());
  if (gpu < 0 || gpu >= n)
    return error(Code::invalid_argument, std::string(what) + " on gpu " + std::to_string(gpu) +
                                             ": this machine has GPUs 0.." + std::to_string(n - 1));
  return Status();
}

std::string SharedMemory::where(uint64_t va) const {
  const int s = slot_of(va);
  return s < 0 ? std::string("outside every process slot's window") : "in process_slot " + std::to_string(s) + "'s window";
}

Result<uint64_t> SharedMemory::take_range(uint64_t bytes) {
  // 2 MiB alignment for buffers of 2 MiB or more: GPUVM can then use its
  // large pages for them.
  const uint64_t align = bytes >= kHugePage ? kHugePage : kPage;
  if (std::optional<uint64_t> start = util::take_first_fit(free_, bytes, align)) return *start;
  return error(Code::resource_exhausted, "process_slot " + std::to_string(config_.slot) + "'s window (" +
                                             std::to_string(window_.bytes >> 40) + " TiB) has no room for " +
                                             std::to_string(bytes) + " more bytes: free buffers");
}

void SharedMemory::give_range(uint64_t va, uint64_t bytes) { util::give_back(free_, va, bytes); }

Status SharedMemory::attach(Mapped& m, uint32_t import_gpu_id, const std::vector<int>& map_to, CpuView view) {
  const std::string what = std::to_string(m.size) + " bytes at " + hex(m.va);
  const int e = sys_->import_dmabuf(kfd_fd_, m.va, import_gpu_id, m.dmabuf_fd, &m.handle);
  if (e != 0) return kfd_ioctl_error("AMDKFD_IOC_IMPORT_DMABUF", e, what + " (gpu_id " + std::to_string(import_gpu_id) + ")");
  m.imported_to_kfd = true;
  std::vector<uint32_t> ids;
  for (int g : map_to) ids.push_back(config_.gpus[static_cast<size_t>(g)].gpu_id);
  if (!ids.empty()) {
    uint32_t done = 0;
    const int me = sys_->map_to_gpus(kfd_fd_, m.handle, ids, &done);
    done = std::min<uint32_t>(done, static_cast<uint32_t>(ids.size()));
    m.mapped.assign(ids.begin(), ids.begin() + (me == 0 ? static_cast<long>(ids.size()) : static_cast<long>(done)));
    if (me != 0) {
      const int failed = map_to[std::min<size_t>(done, map_to.size() - 1)];
      return kfd_ioctl_error("AMDKFD_IOC_MAP_MEMORY_TO_GPU", me,
                             what + " to gpu " + std::to_string(failed) + " (gpu_id " +
                                 std::to_string(config_.gpus[static_cast<size_t>(failed)].gpu_id) + ")");
    }
  }
  // The CPU view: the dma-buf's pages at the same address, over the
  // reservation (MAP_FIXED replaces it in one step, so nothing can slip in).
  if (view == CpuView::none) return Status();
  int err = 0;
  std::optional<uint64_t> at = sys_->mmap(m.va, m.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, m.dmabuf_fd, &err);
  if (at && *at == m.va) {
    m.cpu_mapped = true;
    m.host = reinterpret_cast<void*>(m.va);
  } else if (view == CpuView::required) {
    return error(Code::unavailable, "mapping the CPU view of " + what + " (mmap of its dma-buf): " + errno_text(err) +
                                        "; on small-BAR systems allocate device memory without a CPU view");
  }
  return Status();
}

Status SharedMemory::detach(Mapped& m, bool reserve) {
  Status st;
  auto keep = [&](Status s) {
    if (st.ok() && !s.ok()) st = std::move(s);
  };
  const std::string what = std::to_string(m.size) + " bytes at " + hex(m.va);
  // CPU view first: back to a PROT_NONE reservation (our window) or gone.
  int err = 0;
  if (reserve) {
    std::optional<uint64_t> at = sys_->mmap(m.va, m.size, PROT_NONE,
                                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, &err);
    if (!at) keep(error(Code::internal, "restoring the reservation under " + what + ": " + errno_text(err)));
  } else if ((err = sys_->munmap(m.va, m.size)) != 0) {
    keep(error(Code::internal, "munmap of " + what + ": " + errno_text(err)));
  }
  m.cpu_mapped = false;
  m.host = nullptr;
  if (!m.mapped.empty()) {
    uint32_t done = 0;
    if (int e = sys_->unmap_from_gpus(kfd_fd_, m.handle, m.mapped, &done); e != 0)
      keep(kfd_ioctl_error("AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU", e, what));
    m.mapped.clear();
  }
  if (m.imported_to_kfd) {
    if (int e = sys_->free_memory(kfd_fd_, m.handle); e != 0) keep(kfd_ioctl_error("AMDKFD_IOC_FREE_MEMORY_OF_GPU", e, what));
    m.imported_to_kfd = false;
  }
  if (m.dmabuf_fd >= 0) {
    (void)sys_->close(m.dmabuf_fd);
    m.dmabuf_fd = -1;
  }
  if (m.bo) {
    if (int e = sys_->bo_free(m.bo); e != 0)
      keep(error(Code::internal, "amdgpu_bo_free of " + what + ": " + errno_text(e)));
    m.bo = 0;
  }
  return st;
}

Result<Buffer> SharedMemory::alloc(int gpu, size_t bytes, MemKind kind, const std::vector<int>& map_to) {
  if (bytes == 0) return error(Code::invalid_argument, "alloc of 0 bytes: give a size of at least 1");
  if (bytes > window_.bytes)
    return error(Code::resource_exhausted, "alloc of " + std::to_string(bytes) + " bytes: larger than process_slot " +
                                               std::to_string(config_.slot) + "'s window");
  for (int g : map_to) CONCCL_RETURN_IF_ERROR(check_gpu(g, "mapping a shareable buffer"));
  const uint64_t size = round_up(bytes, kPage);
  Mapped m;
  m.size = size;
  m.kind = kind;
  size_t render_gpu = 0;
  if (kind == MemKind::device) {
    CONCCL_RETURN_IF_ERROR(check_gpu(gpu, "alloc"));
    m.gpu = gpu;
    render_gpu = static_cast<size_t>(gpu);
  }
  const ShareGpu& rg = config_.gpus[render_gpu];
  std::lock_guard<std::mutex> lock(mu_);
  Result<uint64_t> va = take_range(size);
  if (!va.ok()) return va.status();
  m.va = *va;
  // The kernel hands out cleared memory: TTM zeroes the system pages of user
  // buffer objects, and VRAM is cleared on request
  // (AMDGPU_GEM_CREATE_VRAM_CLEARED, include/uapi/drm/amdgpu_drm.h).
  const uint32_t domain = kind == MemKind::device ? kGemDomainVram : kGemDomainGtt;
  uint64_t flags = kGemCreateCpuAccessRequired | (kind == MemKind::device ? kGemCreateVramCleared : 0);
  // Host memory is fine-grained, as the non-shared path's (policy.cpp:
  // KFD's COHERENT | UNCACHED): GPUs map it uncached (MTYPE UC on gfx9, by
  // amdgpu_amdkfd_gpuvm.c / amdgpu_vm's coherence flags), so a compute
  // kernel polling a signal here never spins on a stale L2 line. The GEM
  // flags are include/uapi/drm/amdgpu_drm.h AMDGPU_GEM_CREATE_COHERENT and
  // _UNCACHED; a kernel that does not know them refuses them (EINVAL from
  // amdgpu_gem_create_ioctl's flag check), and the buffer is then made
  // without them, coarse-grained, as before (the DMA engines do not mind).
  if (kind == MemKind::host) flags |= kGemCreateCoherent | kGemCreateUncached;
  int e = sys_->bo_alloc_export(rg.render_minor, size, domain, flags, &m.bo, &m.dmabuf_fd);
  if (e == EINVAL && kind == MemKind::host) {
    flags &= ~(kGemCreateCoherent | kGemCreateUncached);
    e = sys_->bo_alloc_export(rg.render_minor, size, domain, flags, &m.bo, &m.dmabuf_fd);
  }
  if (e != 0 && kind == MemKind::device) {
    // Small BAR: no CPU-visible VRAM left. VRAM without a CPU view.
    flags = kGemCreateVramCleared;
    e = sys_->bo_alloc_export(rg.render_minor, size, domain, flags, &m.bo, &m.dmabuf_fd);
  }
  if (e != 0) {
    give_range(m.va, size);
    return error(e == ENOMEM ? Code::resource_exhausted : Code::unavailable,
                 "allocating " + std::to_string(size) + " bytes of " +
                     (kind == MemKind::device ? "VRAM on gpu " + std::to_string(gpu) : std::string("host memory (GTT)")) +
                     " on renderD" + std::to_string(rg.render_minor) + " (amdgpu_bo_alloc + dma-buf export): " +
                     errno_text(e) + (e == ENOMEM ? "; free memory or allocate less" : "; see dmesg"));
  }
  const uint32_t import_gpu_id = rg.gpu_id;
  if (Status st = attach(m, import_gpu_id, map_to,
                         (flags & kGemCreateCpuAccessRequired) ? CpuView::required : CpuView::none); !st.ok()) {
    if (detach(m, true).ok()) give_range(m.va, size);  // else the address stays out of use
    return st.prefix("a shareable buffer of process_slot " + std::to_string(config_.slot));
  }
  m.serial = g_next_serial.fetch_add(1);
  own_[m.va] = m;
  Buffer b;
  b.va = m.va;
  b.host = m.host;
  b.size = bytes;
  b.gpu = m.gpu;
  b.kind = kind;
  b.id = m.va;
  return b;
}

Status SharedMemory::free(uint64_t va) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = own_.find(va);
  if (it == own_.end())
    return error(Code::invalid_argument, "free: " + hex(va) + " is not a buffer of process_slot " +
                                             std::to_string(config_.slot) + "'s window (freed already?)");
  Mapped m = it->second;
  own_.erase(it);
  Status st = detach(m, true);
  // After a failed unmap the GPU may still reach those pages: their
  // addresses stay out of use rather than go to another buffer.
  if (st.ok()) give_range(m.va, m.size);
  return st.prefix("free of " + hex(va));
}

Result<SharedRegion> SharedMemory::share(uint64_t va, size_t bytes, int* fd) {
  if (!fd) return error(Code::invalid_argument, "share needs somewhere to put the file descriptor");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = own_.upper_bound(va);
  const Mapped* m = nullptr;
  if (it != own_.begin()) {
    --it;
    if (va >= it->second.va && va - it->second.va < it->second.size &&
        std::max<size_t>(bytes, 1) <= it->second.size - (va - it->second.va))
      m = &it->second;
  }
  if (!m)
    return error(Code::invalid_argument, "share: [" + hex(va) + ", +" + std::to_string(bytes) +
                                             ") is not inside one buffer of process_slot " +
                                             std::to_string(config_.slot) +
                                             "'s window: only memory this device allocated can be shared");
  int out = -1;
  if (int e = sys_->dup(m->dmabuf_fd, &out); e != 0)
    return error(Code::resource_exhausted, "share: dup of the dma-buf of " + hex(m->va) + ": " + errno_text(e));
  *fd = out;
  SharedRegion r;
  r.va = m->va;
  r.size = m->size;
  r.kind = m->kind;
  r.gpu = m->gpu;
  r.node_gpu_id = config_.gpus[m->gpu >= 0 ? static_cast<size_t>(m->gpu) : 0].gpu_id;  // the GPU holding the BO
  r.serial = m->serial;
  return r;
}

Status SharedMemory::import(const SharedRegion& r, int fd, const std::vector<int>& map_to) {
  struct Owned {  // closes fd unless the import keeps it
    ShareSys* sys;
    int fd;
    ~Owned() {
      if (fd >= 0) (void)sys->close(fd);
    }
  } owned{sys_.get(), fd};
  const std::string what = "memory of another process at [" + hex(r.va) + ", +" + hex(r.size) + ")";
  if (fd < 0) return error(Code::invalid_argument, "import of " + what + " without a file descriptor");
  if (r.size == 0 || (r.va | r.size) % kPage || r.va + r.size > kGpuVmLimit || r.va + r.size < r.va)
    return error(Code::invalid_argument, "import of " + what + ": not page-aligned, or past the 47-bit GPUVM limit");
  if (r.kind == MemKind::device && r.node_gpu_id == 0) CONCCL_RETURN_IF_ERROR(check_gpu(r.gpu, "import"));
  for (int g : map_to) CONCCL_RETURN_IF_ERROR(check_gpu(g, "mapping imported memory"));
  if (r.va < window_.end() && window_.base < r.va + r.size)
    return error(Code::invalid_argument,
                 what + " lies in this process's own window: another process uses process_slot " +
                     std::to_string(config_.slot) +
                     ", the same as this one; give each process of a communicator its own slot (its rank)");

  std::lock_guard<std::mutex> lock(mu_);
  // What we imported there before: the same allocation is reused; anything
  // else overlapping is stale (its owner freed it, else the new region could
  // not be there) and is dropped.
  Status dropped;
  for (auto it = imported_.begin(); it != imported_.end();) {
    Mapped& old = it->second;
    const bool overlaps = old.va < r.va + r.size && r.va < old.va + old.size;
    if (!overlaps) {
      ++it;
      continue;
    }
    if (old.va == r.va && old.size == r.size && old.serial == r.serial) return Status();  // mapped before
    if (Status st = detach(old, false); !st.ok() && dropped.ok()) dropped = st;
    it = imported_.erase(it);
  }
  if (!dropped.ok()) return dropped.prefix("dropping the earlier import under " + what);

  Mapped m;
  m.va = r.va;
  m.size = r.size;
  m.kind = r.kind;
  m.gpu = r.kind == MemKind::device ? r.gpu : -1;
  m.serial = r.serial;
  // The address first, so that nothing else of this process takes it while
  // KFD maps it (GPU VA == CPU VA).
  int err = 0;
  std::optional<uint64_t> at = sys_->mmap(r.va, r.size, PROT_NONE,
                                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, &err);
  if (!at || *at != r.va) {
    if (at) (void)sys_->munmap(*at, r.size);
    return error(Code::invalid_argument,
                 "cannot map " + what + " (" + where(r.va) + ") at its address here: " +
                     (at ? std::string("the kernel ignored MAP_FIXED_NOREPLACE") : errno_text(err)) +
                     ". The address is in use in this process: processes of one communicator must open their devices "
                     "with distinct process slots (another process uses process_slot " +
                     std::to_string(slot_of(r.va)) + "); if they do, something else of this process is mapped there");
  }
  m.dmabuf_fd = fd;
  owned.fd = -1;  // m owns it now
  const ImportGpu into = import_gpu(r, map_to);
  if (Status st = attach(m, into.gpu_id, map_to, r.kind == MemKind::host ? CpuView::required : CpuView::optional); !st.ok()) {
    (void)detach(m, false);
    if (into.foreign && st.code() == Code::invalid_argument && st.message().find("AMDKFD_IOC_IMPORT_DMABUF") != std::string::npos)
      return error(Code::unavailable,
                   "importing " + what + ": the memory belongs to the GPU with gpu_id " + std::to_string(r.node_gpu_id) +
                       ", which this process does not see, and this kernel refused to import it into gpu_id " +
                       std::to_string(into.gpu_id) + ", one of this process's own (" + st.message() +
                       "). Kernels before KFD imported dma-bufs through DRM (patch \"drm/amdkfd: Import DMABufs for "
                       "interop through DRM\", 2023; Linux 6.1 is one) import a buffer only into the GPU that made "
                       "it: let every rank see every GPU of the node (no per-rank GPU isolation by cgroups, Slurm, "
                       "Kubernetes or --device), or run a newer kernel or amdgpu-dkms");
    return st.prefix("importing " + what);
  }
  // The descriptor is not needed past here: KFD holds its own reference to the
  // dma-buf once imported (linux amdkfd kfd_chardev.c kfd_ioctl_import_dmabuf ->
  // amdgpu_amdkfd_gpuvm.c import_obj_create, get_dma_buf), and the CPU mapping
  // holds the file. Keeping one descriptor per import ran past the default
  // RLIMIT_NOFILE (1024) with many peers and plans; then dup() in share() and
  // SCM_RIGHTS (truncated: MSG_CTRUNC) failed.
  (void)sys_->close(m.dmabuf_fd);
  m.dmabuf_fd = -1;
  imported_[m.va] = m;
  return Status();
}

// Which GPU's KFD device takes the import. The GPU holding the buffer
// object, where this process sees it: every kernel imports there (Linux 6.1's
// amdgpu_amdkfd_gpuvm_import_dmabuf refuses a buffer of another device). A
// GPU hidden from this process (per-rank isolation) has no KFD device here;
// newer kernels import into any GPU of ours (kfd_chardev.c
// kfd_ioctl_import_dmabuf -> amdgpu_amdkfd_gpuvm_import_dmabuf_fd, through
// DRM PRIME: a foreign buffer is attached over P2P), so the import goes into
// the first GPU it is mapped to. A region without node_gpu_id (0) names the
// owner's GPU by index only, as the owner numbers them: that index is used.
SharedMemory::ImportGpu SharedMemory::import_gpu(const SharedRegion& r, const std::vector<int>& map_to) const {
  if (r.node_gpu_id == 0)
    return {config_.gpus[r.kind == MemKind::device ? static_cast<size_t>(r.gpu) : 0].gpu_id, false};
  for (const ShareGpu& g : config_.gpus)
    if (g.gpu_id == r.node_gpu_id) return {g.gpu_id, false};
  return {config_.gpus[map_to.empty() ? 0 : static_cast<size_t>(map_to[0])].gpu_id, true};
}

const SharedMemory::Mapped* SharedMemory::holding(uint64_t va) const {
  for (const std::map<uint64_t, Mapped>* list : {&own_, &imported_}) {
    auto it = list->upper_bound(va);
    if (it == list->begin()) continue;
    --it;
    if (va >= it->second.va && va - it->second.va < it->second.size) return &it->second;
  }
  return nullptr;
}

std::optional<bool> SharedMemory::covers(uint64_t va, size_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (const Mapped* m = holding(va)) return bytes <= m->size - (va - m->va);
  if (window_.contains(va, 1)) return false;  // our window, but no buffer there
  return std::nullopt;
}

void* SharedMemory::host_pointer(uint64_t va, size_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Mapped* m = holding(va);
  if (!m || !m->host || bytes > m->size - (va - m->va)) return nullptr;
  return static_cast<uint8_t*>(m->host) + (va - m->va);
}

size_t SharedMemory::buffers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return own_.size();
}

size_t SharedMemory::imports() const {
  std::lock_guard<std::mutex> lock(mu_);
  return imported_.size();
}

}  // namespace conccl::kfd
