// tests/backends/kfd/fake_share_sys.hpp - a ShareSys (src/backends/kfd/kfd_share.hpp)
// that runs without an AMD GPU. Its "dma-buf" is a memfd, so mmapping it at
// a fixed address really shares memory, across fork() too; the KFD ioctls
// record their arguments and hand out handles; any call fails on request with
// the errno asked for. mmap, munmap, dup and close are the real ones (and
// recorded), so address collisions are the kernel's.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backends/kfd/kfd_share.hpp"
#include "util/sanitizers.hpp"

namespace fakeshare {

struct Call {
  explicit Call(std::string name = "") : op(std::move(name)) {}
  std::string op;  // "open_kfd", "import_dmabuf", "map", "unmap", "free", "bo_alloc_export", "bo_free",
                   // "mmap", "munmap", "dup", "close"
  uint64_t va = 0, size = 0, handle = 0, bo = 0;
  uint32_t gpu_id = 0;
  std::vector<uint32_t> gpu_ids;
  int fd = -1, render_minor = -1, prot = 0, flags = 0;
  uint32_t domain = 0;
  uint64_t gem_flags = 0;
};

class FakeShareSys final : public conccl::kfd::ShareSys {
 public:
  // Calls named here fail once with the errno given (map: after
  // `map_done_before_failure` of the GPUs).
  std::map<std::string, int> fail_next;
  uint32_t map_done_before_failure = 0;
  bool unavailable = false;  // available() says no (as without libdrm_amdgpu)
  // bo_alloc_export refuses CPU-visible VRAM (small BAR).
  bool small_bar = false;
  // bo_alloc_export refuses the COHERENT/UNCACHED GEM flags (EINVAL), as a
  // kernel that does not know them does.
  bool no_coherence_flags = false;

  std::vector<Call> calls() const {
    std::lock_guard<std::mutex> l(mu_);
    return calls_;
  }
  void clear() {
    std::lock_guard<std::mutex> l(mu_);
    calls_.clear();
  }
  // Calls of these ops only, in order.
  std::vector<Call> calls_of(std::initializer_list<const char*> ops) const {
    std::vector<Call> out;
    for (const Call& c : calls())
      for (const char* o : ops)
        if (c.op == o) out.push_back(c);
    return out;
  }
  // Live things, for leak checks.
  int live_bos() const {
    std::lock_guard<std::mutex> l(mu_);
    return static_cast<int>(bos_.size());
  }
  int live_kfd_handles() const {
    std::lock_guard<std::mutex> l(mu_);
    return static_cast<int>(handles_.size());
  }
  int kfd_fd() const { return kfd_fd_; }

  conccl::Status available() const override {
    if (unavailable)
      return conccl::error(conccl::Code::unavailable, "fake: built without libdrm_amdgpu: install libdrm-dev");
    return conccl::Status();
  }
  int open_kfd(const std::string& path, int* fd) override {
    Call c{"open_kfd"};
    if (int e = take_failure("open_kfd"); e) return record(c, e);
    *fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);  // a real descriptor, so close() is real too
    kfd_fd_ = *fd;
    c.fd = *fd;
    (void)path;
    return record(c, 0);
  }
  int import_dmabuf(int kfd_fd, uint64_t va, uint32_t gpu_id, int dmabuf_fd, uint64_t* handle) override {
    Call c{"import_dmabuf"};
    c.va = va;
    c.gpu_id = gpu_id;
    c.fd = dmabuf_fd;
    if (kfd_fd != kfd_fd_) return record(c, EBADF);
    if (int e = take_failure("import_dmabuf"); e) return record(c, e);
    std::lock_guard<std::mutex> l(mu_);
    *handle = c.handle = next_handle_++;
    handles_[c.handle] = va;
    calls_.push_back(c);
    return 0;
  }
  int map_to_gpus(int kfd_fd, uint64_t handle, const std::vector<uint32_t>& ids, uint32_t* done) override {
    Call c{"map"};
    c.handle = handle;
    c.gpu_ids = ids;
    *done = 0;
    if (kfd_fd != kfd_fd_ || !live_handle(handle)) return record(c, EINVAL);
    if (int e = take_failure("map"); e) {
      *done = map_done_before_failure;
      return record(c, e);
    }
    *done = static_cast<uint32_t>(ids.size());
    return record(c, 0);
  }
  int unmap_from_gpus(int kfd_fd, uint64_t handle, const std::vector<uint32_t>& ids, uint32_t* done) override {
    Call c{"unmap"};
    c.handle = handle;
    c.gpu_ids = ids;
    *done = 0;
    if (kfd_fd != kfd_fd_ || !live_handle(handle)) return record(c, EINVAL);
    if (int e = take_failure("unmap"); e) return record(c, e);
    *done = static_cast<uint32_t>(ids.size());
    return record(c, 0);
  }
  int free_memory(int kfd_fd, uint64_t handle) override {
    Call c{"free"};
    c.handle = handle;
    if (kfd_fd != kfd_fd_) return record(c, EBADF);
    if (int e = take_failure("free"); e) return record(c, e);
    std::lock_guard<std::mutex> l(mu_);
    calls_.push_back(c);
    return handles_.erase(handle) ? 0 : EINVAL;
  }
  int bo_alloc_export(int render_minor, uint64_t bytes, uint32_t domain, uint64_t flags, uint64_t* bo,
                      int* dmabuf_fd) override {
    Call c{"bo_alloc_export"};
    c.render_minor = render_minor;
    c.size = bytes;
    c.domain = domain;
    c.gem_flags = flags;
    if (int e = take_failure("bo_alloc_export"); e) return record(c, e);
    if (small_bar && domain == conccl::kfd::kGemDomainVram && (flags & conccl::kfd::kGemCreateCpuAccessRequired))
      return record(c, ENOMEM);
    if (no_coherence_flags && (flags & (conccl::kfd::kGemCreateCoherent | conccl::kfd::kGemCreateUncached)))
      return record(c, EINVAL);
    const int fd = memfd_create("fake-dmabuf", MFD_CLOEXEC);
    if (fd < 0) return record(c, errno);
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const int e = errno;
      ::close(fd);
      return record(c, e);
    }
    std::lock_guard<std::mutex> l(mu_);
    *bo = c.bo = next_bo_++;
    *dmabuf_fd = c.fd = fd;
    bos_[c.bo] = bytes;
    calls_.push_back(c);
    return 0;
  }
  int bo_free(uint64_t bo) override {
    Call c{"bo_free"};
    c.bo = bo;
    std::lock_guard<std::mutex> l(mu_);
    calls_.push_back(c);
    return bos_.erase(bo) ? 0 : EINVAL;
  }
  std::optional<uint64_t> mmap(uint64_t addr, uint64_t bytes, int prot, int flags, int fd, int* err) override {
    Call c{"mmap"};
    c.va = addr;
    c.size = bytes;
    c.prot = prot;
    c.flags = flags;
    c.fd = fd;
    if (int e = take_failure(prot == PROT_NONE ? "mmap_reserve" : "mmap_view"); e) {
      *err = e;
      (void)record(c, e);
      return std::nullopt;
    }
    void* p = ::mmap(reinterpret_cast<void*>(addr), bytes, prot, flags, fd, 0);
    if (p == MAP_FAILED) {
      *err = errno;
      (void)record(c, *err);
      return std::nullopt;
    }
    (void)record(c, 0);
    return reinterpret_cast<uint64_t>(p);
  }
  int munmap(uint64_t addr, uint64_t bytes) override {
    Call c{"munmap"};
    c.va = addr;
    c.size = bytes;
    return record(c, ::munmap(reinterpret_cast<void*>(addr), bytes) == 0 ? 0 : errno);
  }
  int dup(int fd, int* out) override {
    Call c{"dup"};
    c.fd = fd;
    if (int e = take_failure("dup"); e) return record(c, e);
    const int d = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0) return record(c, errno);
    *out = d;
    return record(c, 0);
  }
  int close(int fd) override {
    Call c{"close"};
    c.fd = fd;
    return record(c, ::close(fd) == 0 ? 0 : errno);
  }

 private:
  int take_failure(const std::string& op) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = fail_next.find(op);
    if (it == fail_next.end()) return 0;
    const int e = it->second;
    fail_next.erase(it);
    return e;
  }
  int record(Call c, int result) {
    std::lock_guard<std::mutex> l(mu_);
    calls_.push_back(std::move(c));
    return result;
  }
  bool live_handle(uint64_t h) const {
    std::lock_guard<std::mutex> l(mu_);
    return handles_.count(h) != 0;
  }

  mutable std::mutex mu_;
  std::vector<Call> calls_;
  std::map<uint64_t, uint64_t> handles_;  // KFD handle -> va
  std::map<uint64_t, uint64_t> bos_;      // bo -> bytes
  uint64_t next_handle_ = 0x1000;
  uint64_t next_bo_ = 1;
  int kfd_fd_ = -1;
};

// ThreadSanitizer keeps the 32..96 TiB the slot windows use for itself (its
// shadow and metadata are not application memory), so the windows cannot be
// reserved in TSan builds: the tests that need them skip there, as
// kfd_share.cpp's error tells users.
#define CONCCL_SKIP_WITHOUT_SLOT_WINDOWS() \
  if (::conccl::util::kThreadSanitizer) GTEST_SKIP() << "ThreadSanitizer owns the process-slot windows' addresses"

}  // namespace fakeshare
