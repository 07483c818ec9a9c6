// src/backends/kfd/kfd_share_sys.cpp - the real calls behind ShareSys
// (kfd_share.hpp): KFD ioctls on our own /dev/kfd descriptor, buffer objects
// through libdrm_amdgpu, and plain mmap/munmap/dup/close.
//
// Layouts: include/uapi/linux/kfd_ioctl.h (Linux 6.1: AMDKFD_IOC_IMPORT_DMABUF
// 0x1D, _MAP_MEMORY_TO_GPU 0x18, _UNMAP_MEMORY_FROM_GPU 0x19,
// _FREE_MEMORY_OF_GPU 0x17), through the mirrors in kfd_uapi.hpp, and
// libdrm's amdgpu.h / include/uapi/drm/amdgpu_drm.h (libdrm-dev 2.4.114). Without
// libdrm_amdgpu (pkg-config libdrm_amdgpu at configure time) this file still
// builds, and available() says what to install.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <mutex>

#include "backends/kfd/kfd_share.hpp"
#include "backends/kfd/kfd_uapi.hpp"

#if defined(CONCCL_HAVE_DRM_AMDGPU)
#include <amdgpu.h>
#include <amdgpu_drm.h>
#endif

namespace conccl::kfd {

#if defined(CONCCL_HAVE_DRM_AMDGPU)
static_assert(kGemDomainGtt == AMDGPU_GEM_DOMAIN_GTT && kGemDomainVram == AMDGPU_GEM_DOMAIN_VRAM);
static_assert(kGemCreateCpuAccessRequired == AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED &&
              kGemCreateVramCleared == AMDGPU_GEM_CREATE_VRAM_CLEARED);
#endif

namespace {

// An ioctl, again on EINTR/EAGAIN (as libhsakmt's kmtIoctl does), a bounded
// number of times: a signal storm must not keep us here for ever.
int kfd_ioctl(int fd, unsigned long request, void* arg) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    if (::ioctl(fd, request, arg) == 0) return 0;
    if (errno != EINTR && errno != EAGAIN) return errno;
  }
  return EINTR;
}

class RealShareSys final : public ShareSys {
 public:
  explicit RealShareSys(std::string dri_dir) : dri_dir_(std::move(dri_dir)) {}
  ~RealShareSys() override {
#if defined(CONCCL_HAVE_DRM_AMDGPU)
    for (auto& [minor, d] : devices_) {
      amdgpu_device_deinitialize(d.dev);
      ::close(d.fd);
    }
#endif
  }
  RealShareSys(const RealShareSys&) = delete;
  RealShareSys& operator=(const RealShareSys&) = delete;

  Status available() const override {
#if defined(CONCCL_HAVE_DRM_AMDGPU)
    return Status();
#else
    return error(Code::unavailable,
                 "memory shared between processes on the kfd backend needs libdrm_amdgpu, and ConCCL was built "
                 "without it: install libdrm-dev (apt-get install libdrm-dev) and rebuild ConCCL "
                 "(docs/multiprocess.md)");
#endif
  }

  int open_kfd(const std::string& path, int* fd) override {
    const int f = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (f < 0) return errno;
    *fd = f;
    return 0;
  }

  int import_dmabuf(int kfd_fd, uint64_t va, uint32_t gpu_id, int dmabuf_fd, uint64_t* handle) override {
    uapi::ImportDmabufArgs a{};
    a.va_addr = va;
    a.gpu_id = gpu_id;
    a.dmabuf_fd = static_cast<uint32_t>(dmabuf_fd);
    if (int e = kfd_ioctl(kfd_fd, uapi::kIocImportDmabuf, &a); e != 0) return e;
    *handle = a.handle;
    return 0;
  }

  int map_to_gpus(int kfd_fd, uint64_t handle, const std::vector<uint32_t>& ids, uint32_t* done) override {
    return map_or_unmap(kfd_fd, uapi::kIocMapMemoryToGpu, handle, ids, done);
  }

  int unmap_from_gpus(int kfd_fd, uint64_t handle, const std::vector<uint32_t>& ids, uint32_t* done) override {
    return map_or_unmap(kfd_fd, uapi::kIocUnmapMemoryFromGpu, handle, ids, done);
  }

  static int map_or_unmap(int kfd_fd, unsigned long request, uint64_t handle, const std::vector<uint32_t>& ids,
                          uint32_t* done) {
    uapi::MapMemoryArgs a{};
    a.handle = handle;
    a.device_ids_array_ptr = reinterpret_cast<uint64_t>(ids.data());
    a.n_devices = static_cast<uint32_t>(ids.size());
    a.n_success = 0;  // KFD resumes from n_success: start at the first
    const int e = kfd_ioctl(kfd_fd, request, &a);
    *done = a.n_success;
    return e;
  }

  int free_memory(int kfd_fd, uint64_t handle) override {
    uapi::FreeMemoryArgs a{};
    a.handle = handle;
    return kfd_ioctl(kfd_fd, uapi::kIocFreeMemoryOfGpu, &a);
  }

  int bo_alloc_export(int render_minor, uint64_t bytes, uint32_t domain, uint64_t flags, uint64_t* bo,
                      int* dmabuf_fd) override {
#if defined(CONCCL_HAVE_DRM_AMDGPU)
    amdgpu_device_handle dev = nullptr;
    if (int e = device(render_minor, &dev); e != 0) return e;
    amdgpu_bo_alloc_request req{};
    req.alloc_size = bytes;
    req.phys_alignment = 4096;
    req.preferred_heap = domain;
    req.flags = flags;
    amdgpu_bo_handle h = nullptr;
    if (int r = amdgpu_bo_alloc(dev, &req, &h); r != 0) return r < 0 ? -r : EIO;
    uint32_t fd = 0;
    if (int r = amdgpu_bo_export(h, amdgpu_bo_handle_type_dma_buf_fd, &fd); r != 0) {
      amdgpu_bo_free(h);
      return r < 0 ? -r : EIO;
    }
    *bo = reinterpret_cast<uint64_t>(h);
    *dmabuf_fd = static_cast<int>(fd);
    return 0;
#else
    (void)render_minor, (void)bytes, (void)domain, (void)flags, (void)bo, (void)dmabuf_fd;
    return ENOSYS;
#endif
  }

  int bo_free(uint64_t bo) override {
#if defined(CONCCL_HAVE_DRM_AMDGPU)
    const int r = amdgpu_bo_free(reinterpret_cast<amdgpu_bo_handle>(bo));
    return r < 0 ? -r : r;
#else
    (void)bo;
    return ENOSYS;
#endif
  }

  std::optional<uint64_t> mmap(uint64_t addr, uint64_t bytes, int prot, int flags, int fd, int* err) override {
    void* p = ::mmap(reinterpret_cast<void*>(addr), bytes, prot, flags, fd, 0);
    if (p == MAP_FAILED) {
      *err = errno;
      return std::nullopt;
    }
    return reinterpret_cast<uint64_t>(p);
  }
  int munmap(uint64_t addr, uint64_t bytes) override {
    return ::munmap(reinterpret_cast<void*>(addr), bytes) == 0 ? 0 : errno;
  }
  int dup(int fd, int* out) override {
    const int d = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0) return errno;
    *out = d;
    return 0;
  }
  int close(int fd) override { return ::close(fd) == 0 ? 0 : errno; }

 private:
#if defined(CONCCL_HAVE_DRM_AMDGPU)
  struct Dev {
    int fd = -1;
    amdgpu_device_handle dev = nullptr;
  };
  // One libdrm device per render node, opened on first use and kept: every
  // buffer object of that GPU belongs to it until freed.
  int device(int minor, amdgpu_device_handle* out) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = devices_.find(minor); it != devices_.end()) {
      *out = it->second.dev;
      return 0;
    }
    const std::string path = dri_dir_ + "/renderD" + std::to_string(minor);
    Dev d;
    d.fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (d.fd < 0) return errno;
    uint32_t major = 0, minor_version = 0;
    if (int r = amdgpu_device_initialize(d.fd, &major, &minor_version, &d.dev); r != 0) {
      ::close(d.fd);
      return r < 0 ? -r : EIO;
    }
    devices_[minor] = d;
    *out = d.dev;
    return 0;
  }
  std::mutex mu_;
  std::map<int, Dev> devices_;
#endif
  std::string dri_dir_;
};

}  // namespace

std::shared_ptr<ShareSys> real_share_sys(const std::string& dri_dir) { return std::make_shared<RealShareSys>(dri_dir); }

}  // namespace conccl::kfd
