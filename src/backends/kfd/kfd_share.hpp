// src/backends/kfd/kfd_share.hpp - memory another process maps at the same
// address, on the KFD backend (internal; docs/multiprocess.md).
//
// One job: a process slot's address window, and the life of the shareable
// buffers in it and of the ones imported from other processes. No driver
// header is included here: every OS and kernel call goes through ShareSys,
// whose real implementation (kfd_share_sys.cpp) uses
// include/uapi/linux/kfd_ioctl.h and libdrm's amdgpu.h, and whose test
// implementation runs on any machine (tests/backends/kfd/fake_share_sys.hpp).
//
// Why this route. Debian's libhsakmt 5.2.3 cannot export a dma-buf, and its
// hsaKmtShareMemory / hsaKmtRegisterSharedHandle choose the importer's
// address themselves (and rely on IPC ioctls upstream kernels never had);
// Linux 6.1's KFD has no AMDKFD_IOC_EXPORT_DMABUF (0x24, Linux 6.2). So a
// shareable buffer is a GEM buffer object allocated on the GPU's render node
// (libdrm amdgpu_bo_alloc), exported as a dma-buf (amdgpu_bo_export), and
// given to KFD with AMDKFD_IOC_IMPORT_DMABUF at an address we choose, in
// this process and in every other one alike. GPU VA == CPU VA in KFD's
// model, so the CPU view is the dma-buf mmapped at the same address.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "conccl/device.hpp"
#include "conccl/status.hpp"

namespace conccl::kfd {

// ---------------------------------------------------------------------------
// The address plan. Slot s owns [kSlotWindowBase + s * kSlotWindowBytes,
// + kSlotWindowBytes). 32 TiB is above where AddressSanitizer's shadow ends
// (~16 TiB) and far above libhsakmt's apertures, which it reserves low in the
// address space; the last window ends at 96 TiB, below 128 TiB (2^47), the
// top of user VA and of the GPUVM range KFD gives gfx9+ dGPUs. 4 TiB per
// slot holds the HBM of eight 192 GB GPUs several times over.
inline constexpr int kMaxProcessSlots = 16;
inline constexpr uint64_t kSlotWindowBase = uint64_t(32) << 40;
inline constexpr uint64_t kSlotWindowBytes = uint64_t(4) << 40;
inline constexpr uint64_t kGpuVmLimit = uint64_t(1) << 47;
static_assert(kSlotWindowBase + kMaxProcessSlots * kSlotWindowBytes <= kGpuVmLimit,
              "every slot window must lie below the 47-bit GPUVM limit");

struct Window {
  uint64_t base = 0;
  uint64_t bytes = 0;
  uint64_t end() const { return base + bytes; }
  bool contains(uint64_t va, uint64_t len) const { return va >= base && len <= bytes && va - base <= bytes - len; }
};
// Errors: invalid_argument for a slot outside 0..kMaxProcessSlots-1.
Result<Window> slot_window(int slot);
// The slot whose window holds va (-1: none).
int slot_of(uint64_t va);

// ---------------------------------------------------------------------------
// Constants of the calls below, as include/uapi/drm/amdgpu_drm.h defines them
// (checked against the header in kfd_share_sys.cpp).
inline constexpr uint32_t kGemDomainGtt = 0x2;                 // AMDGPU_GEM_DOMAIN_GTT
inline constexpr uint32_t kGemDomainVram = 0x4;                // AMDGPU_GEM_DOMAIN_VRAM
inline constexpr uint64_t kGemCreateCpuAccessRequired = 1u << 0;  // AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED
inline constexpr uint64_t kGemCreateVramCleared = 1u << 3;        // AMDGPU_GEM_CREATE_VRAM_CLEARED
inline constexpr uint64_t kGemCreateCoherent = 1u << 13;          // AMDGPU_GEM_CREATE_COHERENT
inline constexpr uint64_t kGemCreateUncached = 1u << 14;          // AMDGPU_GEM_CREATE_UNCACHED

// The seam: every OS and kernel call the shared memory makes. Calls return 0
// or a positive errno (mmap: the address, or nullopt with *err set), never
// throw, and keep nothing of the caller's.
class ShareSys {
 public:
  virtual ~ShareSys() = default;
  // Ok, or why buffers cannot be made here (built without libdrm_amdgpu).
  virtual Status available() const = 0;
  // A file descriptor of the KFD device node (our own: KFD keys its process
  // by mm, so it is the process the thunk opened).
  virtual int open_kfd(const std::string& path, int* fd) = 0;
  // AMDKFD_IOC_IMPORT_DMABUF: dmabuf_fd at va on gpu_id; *handle from KFD.
  virtual int import_dmabuf(int kfd_fd, uint64_t va, uint32_t gpu_id, int dmabuf_fd, uint64_t* handle) = 0;
  // AMDKFD_IOC_MAP_MEMORY_TO_GPU / _UNMAP_MEMORY_FROM_GPU: *done = how many of
  // gpu_ids, from the first, succeeded.
  virtual int map_to_gpus(int kfd_fd, uint64_t handle, const std::vector<uint32_t>& gpu_ids, uint32_t* done) = 0;
  virtual int unmap_from_gpus(int kfd_fd, uint64_t handle, const std::vector<uint32_t>& gpu_ids, uint32_t* done) = 0;
  // AMDKFD_IOC_FREE_MEMORY_OF_GPU.
  virtual int free_memory(int kfd_fd, uint64_t handle) = 0;
  // A buffer object of `bytes` on the render node renderD<minor> (domain and
  // flags: the kGem* values), exported as a dma-buf: *bo is the seam's
  // handle for bo_free, *dmabuf_fd a new descriptor.
  virtual int bo_alloc_export(int render_minor, uint64_t bytes, uint32_t domain, uint64_t flags, uint64_t* bo,
                              int* dmabuf_fd) = 0;
  virtual int bo_free(uint64_t bo) = 0;
  virtual std::optional<uint64_t> mmap(uint64_t addr, uint64_t bytes, int prot, int flags, int fd, int* err) = 0;
  virtual int munmap(uint64_t addr, uint64_t bytes) = 0;
  virtual int dup(int fd, int* out) = 0;
  virtual int close(int fd) = 0;
};
// The real calls (kfd_share_sys.cpp); dri_dir holds renderD<minor>.
std::shared_ptr<ShareSys> real_share_sys(const std::string& dri_dir);

// ---------------------------------------------------------------------------
// The shared memory of one device opened with a process slot.

struct ShareGpu {
  uint32_t gpu_id = 0;   // KFD's gpu_id (sysfs nodes/N/gpu_id), what the ioctls take
  int render_minor = 0;  // sysfs drm_render_minor: where its buffer objects are allocated
};

struct ShareConfig {
  int slot = -1;
  std::vector<ShareGpu> gpus;  // by ConCCL GPU index
  std::string kfd_path = "/dev/kfd";
};

class SharedMemory {
 public:
  // Reserves the slot's window (PROT_NONE, no memory behind it) and opens
  // KFD. Errors: the slot out of range; its window already in use in this
  // process; /dev/kfd not openable.
  static Result<std::unique_ptr<SharedMemory>> open(std::shared_ptr<ShareSys> sys, const ShareConfig& config);
  // Frees every buffer, drops every import, gives the window back.
  ~SharedMemory();
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  int slot() const { return config_.slot; }
  const Window& window() const { return window_; }

  // A buffer in the window: device memory of `gpu` (VRAM, CPU-visible where
  // the BAR allows) or host memory (GTT, on GPU 0's render node: every
  // process then imports it through the same GPU). Mapped to map_to (ConCCL
  // GPU indices; for device memory the owner first). Contents are zero.
  Result<Buffer> alloc(int gpu, size_t bytes, MemKind kind, const std::vector<int>& map_to);
  // Reverses alloc. Errors: not a buffer of the window (or freed already).
  Status free(uint64_t va);
  // The region holding [va, va+bytes) of one of our buffers and a new dma-buf
  // descriptor for it (the caller closes it).
  Result<SharedRegion> share(uint64_t va, size_t bytes, int* fd);
  // Maps another process's region at its address, to map_to; takes fd. A
  // region imported before with the same serial is reused; another serial
  // at that address replaces the old import.
  Status import(const SharedRegion& region, int fd, const std::vector<int>& map_to);

  // Whether [va, va+bytes) starts in our window or in an import: nullopt if
  // not; else whether it lies inside one buffer or import.
  std::optional<bool> covers(uint64_t va, size_t bytes) const;
  void* host_pointer(uint64_t va, size_t bytes) const;
  size_t buffers() const;
  size_t imports() const;

 private:
  struct Mapped {
    uint64_t va = 0, size = 0;
    MemKind kind = MemKind::host;
    int gpu = -1;
    uint64_t serial = 0;
    uint64_t bo = 0;          // ours only (0 for imports)
    int dmabuf_fd = -1;
    uint64_t handle = 0;      // KFD's
    bool imported_to_kfd = false;
    std::vector<uint32_t> mapped;  // gpu_ids mapped, in order
    void* host = nullptr;
    bool cpu_mapped = false;  // the dma-buf is mmapped at va
  };

  SharedMemory(std::shared_ptr<ShareSys> sys, ShareConfig config, Window window, int kfd_fd);
  Result<uint64_t> take_range(uint64_t bytes);
  void give_range(uint64_t va, uint64_t bytes);
  // IMPORT_DMABUF + MAP + the CPU view over an address already reserved.
  // The view: required (host memory, CPU-visible VRAM), optional (another
  // process's VRAM: where the BAR allows), none (VRAM made without one).
  enum class CpuView : uint8_t { required, optional, none };
  Status attach(Mapped& m, uint32_t import_gpu_id, const std::vector<int>& map_to, CpuView view);
  // Reverses attach; `reserve` leaves a PROT_NONE reservation behind (our
  // window), else the address is given back.
  Status detach(Mapped& m, bool reserve);
  Status check_gpu(int gpu, const char* what) const;
  struct ImportGpu {
    uint32_t gpu_id = 0;
    bool foreign = false;  // not the GPU holding the memory: that one is hidden from this process
  };
  ImportGpu import_gpu(const SharedRegion& r, const std::vector<int>& map_to) const;
  const Mapped* holding(uint64_t va) const;  // our buffer or import holding va; mu_ held
  std::string where(uint64_t va) const;  // "process_slot N's window", for messages

  std::shared_ptr<ShareSys> sys_;
  ShareConfig config_;
  Window window_;
  int kfd_fd_ = -1;
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> free_;  // window: va -> bytes, not in use
  std::map<uint64_t, Mapped> own_;     // by va
  std::map<uint64_t, Mapped> imported_;  // by va
  uint64_t next_serial_ = 1;
};

// The ioctl's failure as a Status: names the call, errno and the fix.
Status kfd_ioctl_error(const char* ioctl_name, int err, const std::string& what);

}  // namespace conccl::kfd
