// src/backends/nv/nv_adapter.hpp - GenericDevice, the conccl::Device over
// one nv::Gpu per GPU (nv_adapter.cpp says what it does); its CUDA side
// (CUDA memory, the reduce kernel) is in nv_adapter_cuda.cpp. Internal to
// the nv backend.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include "backends/nv/nv_device.hpp"
#include "backends/nv/reduce_kernel.hpp"
#include "backends/nv/rm_abi.hpp"
#include "conccl/collectives.hpp"
#include "conccl/device.hpp"
#include "conccl/nv.hpp"

namespace conccl::nv {

constexpr size_t kCell = 64;            // small host allocations: one cell each
constexpr size_t kPoolPage = 64 << 10;  // cells come from pages of this size

class GenericDevice final : public conccl::Device {
 public:
  GenericDevice(std::vector<std::unique_ptr<nv::Gpu>> devs, int slot) : devs_(std::move(devs)), slot_(slot) {}
  ~GenericDevice() override {
    for (auto* m : {&buffers_, &pool_pages_})
      for (auto& [va, a] : *m) (void)unregister_and_release(a);
    for (auto& [va, im] : imports_) drop_import(im);
  }

  // ---- memory across processes (docs/multiprocess.md) ----
  // Gpu memory crosses as an RM export fd, imported by every client of
  // the other process at the owner's address (nv_peer.cpp); host memory as
  // the memfd behind it, mapped there at the same address and registered
  // with every client (map_host). Process slots keep the addresses apart.
  int process_slot() const override { return slot_; }
  // ---- reductions' compute (reduce_kernel.hpp) ----
  // Staging is CUDA memory (the kernel reads it) registered for the engines.
  Result<conccl::Buffer> alloc_for_compute(int gpu, size_t bytes) override;
  // alloc(Placement::cuda): alloc_for_compute's memory, zeroed by a CE fill.
  Result<conccl::Buffer> alloc_cuda_memory(int gpu, size_t bytes);
  Status free_for_compute(const conccl::Buffer& b) override;
  uint64_t compute_address(uint64_t va) const override {
    const Alloc* a = find_alloc(va, 1);
    return a && a->cuda_base ? a->cuda_base + (va - a->own.va) : va;
  }
  bool compute_reaches(uint64_t va, size_t bytes) const override {
    const Alloc* a = find_alloc(va, bytes ? bytes : 1);
    if (a) return a->cuda_base != 0;
    for (const auto& d : devs_)
      if (d->is_registered(va, bytes ? bytes : 1)) return true;
    return false;
  }
  Status reduce_now(const DeviceReduceStep& step, Deadline deadline) override;
  std::map<uint64_t, nv::CudaAlloc> compute_allocs_;  // by engine address

  uint64_t allocation_serial(uint64_t va) const override {
    const Alloc* a = find_alloc(va, 1);
    return a ? a->serial : 0;
  }
  Result<SharedRegion> share(const conccl::Buffer& b, int* fd) override {
    const Alloc* a = find_alloc(b.va, b.size ? b.size : 1);
    if (!a)
      return error(Code::invalid_argument,
                   "share: buffer " + hex(b.va) + " was not allocated by this nv device (CUDA memory is shared only "
                   "when registered on a device opened with a process slot, which maps it into the slot's window)");
    SharedRegion r;
    r.va = a->own.va;
    r.size = a->own.size;
    r.serial = a->serial;
    if (a->cuda_base) {  // CUDA memory: CUDA's export fd again
      Result<nv::Gpu::CudaAllocation> ca = devs_[static_cast<size_t>(a->owner)]->export_cuda(a->cuda_base);
      if (!ca.ok()) return ca.status().prefix("share");
      *fd = ca->fd;
      r.kind = conccl::MemKind::device;
      r.gpu = a->owner;
    } else if (a->own.kind == nv::Placement::device) {
      Result<int> f = devs_[static_cast<size_t>(a->owner)]->export_fd(a->own);
      if (!f.ok()) return f.status().prefix("share");
      *fd = *f;
      r.kind = conccl::MemKind::device;
      r.gpu = a->owner;
    } else {
      if (a->own.fd < 0) return error(Code::internal, "share: host buffer " + hex(b.va) + " has no memfd");
      *fd = ::fcntl(a->own.fd, F_DUPFD_CLOEXEC, 0);
      if (*fd < 0) return error(Code::resource_exhausted, std::string("share: dup: ") + std::strerror(errno));
      r.kind = conccl::MemKind::host;
      r.gpu = -1;
    }
    if (static_cast<size_t>(a->owner) < topo_.gpus.size()) r.node_gpu_id = topo_.gpus[static_cast<size_t>(a->owner)].node_gpu_id;
    return r;
  }
  Status import_shared(const SharedRegion& r, int fd) override {
    struct Close {
      int fd;
      ~Close() { ::close(fd); }
    } close_fd{fd};
    if (auto it = imports_.find(r.va); it != imports_.end() && it->second.serial == r.serial &&
                                       it->second.size == r.size)
      return Status();  // mapped before
    // An earlier import that overlaps this region is memory its owner has
    // freed since (one process's allocations never overlap, and the address
    // range is the owner's process slot): the owner allocated again there,
    // at the same start or across it (a torch group made again after its
    // destruction freed its heaps). Unmap the old, map the new.
    for (auto it = imports_.begin(); it != imports_.end();) {
      if (it->second.va < r.va + r.size && r.va < it->second.va + it->second.size) {
        drop_import(it->second);
        it = imports_.erase(it);
      } else {
        ++it;
      }
    }
    if (r.size == 0 || (r.va | r.size) & 0xFFF)
      return error(Code::invalid_argument, "import of " + hex(r.va) + "+" + hex(r.size) + ": not page-aligned");
    if (find_alloc(r.va, 1) || find_alloc(r.va + r.size - 1, 1))
      return error(Code::invalid_argument, "memory of another process at " + hex(r.va) +
                                               " overlaps this process's own: the two opened their devices with the "
                                               "same DeviceOptions::process_slot; give each its own (its rank)");
    Import im;
    im.va = r.va;
    im.size = r.size;
    im.kind = r.kind;
    im.serial = r.serial;
    // The address, here too: the owner's pages (host) or a reservation that
    // keeps anything else away from the GPU mapping (device).
    const bool host = r.kind == conccl::MemKind::host;
    void* p = mmap(reinterpret_cast<void*>(r.va), r.size, host ? PROT_READ | PROT_WRITE : PROT_NONE,
                   host ? MAP_SHARED | MAP_FIXED_NOREPLACE : MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
                   host ? fd : -1, 0);
    if (p == MAP_FAILED || p != reinterpret_cast<void*>(r.va)) {
      const int e = errno;
      if (p != MAP_FAILED) munmap(p, r.size);
      return error(Code::invalid_argument, "cannot map another process's memory at " + hex(r.va) + ": " +
                                               std::strerror(e) + " (the address is in use here; processes of one "
                                               "communicator must open their devices with distinct process slots)");
    }
    im.host = host ? p : nullptr;
    Status st;
    for (size_t g = 0; g < devs_.size() && st.ok(); ++g) {
      Result<nv::Allocation> v = host ? devs_[g]->map_host(p, r.size) : devs_[g]->import_fd(fd, r.va, r.size);
      if (v.ok()) im.views.push_back({g, *v});
      else st = v.status().prefix("mapping another process's " + std::string(host ? "host" : "device") + " memory " +
                                  hex(r.va) + " into GPU " + std::to_string(g));
    }
    if (!st.ok()) {
      drop_import(im);
      return st;
    }
    imports_[r.va] = std::move(im);
    return Status();
  }

  // Links between the GPUs (peer capabilities from RM); fails for a pair
  // without peer access, naming it.
  Status build_topology();

  const Topology& topology() const override { return topo_; }

  Result<conccl::Buffer> alloc(int gpu, size_t bytes, conccl::MemKind kind) override {
    if (kind == conccl::MemKind::cuda) return alloc_cuda_memory(gpu, bytes);
    const bool dev = kind == conccl::MemKind::device;
    if (dev && (gpu < 0 || static_cast<size_t>(gpu) >= devs_.size()))
      return error(Code::not_found, "GPU " + std::to_string(gpu) + " requested; this nv device has " +
                                        std::to_string(devs_.size()) + " (0.." + std::to_string(devs_.size() - 1) + ")");
    if (bytes == 0) return error(Code::invalid_argument, "cannot allocate 0 bytes");
    if (!dev && bytes <= kCell) return alloc_cell();
    const int owner = dev ? gpu : 0;
    nv::Gpu& d = *devs_[static_cast<size_t>(owner)];
    Result<nv::Allocation> b = d.alloc(bytes, dev ? nv::Placement::device : nv::Placement::host);
    if (!b.ok()) return b.status();
    Alloc a{owner, *b, {}};
    if (dev) {
      // conccl::Device promises zeroed memory.
      Status st = d.zero(b->va, b->size, Deadline::after_ms(10000));
      if (!st.ok()) {
        (void)release(a);
        return st.prefix("zeroing " + std::to_string(bytes) + " bytes of device memory");
      }
    } else if (cuda_shared_) {
      Status st = d.cuda_host_register(b->host, b->size);
      if (!st.ok()) {
        (void)release(a);
        return st;
      }
    }
    if (Status st = map_everywhere(a); !st.ok()) {
      (void)release(a);
      return st;
    }
    a.serial = next_serial_++;
    buffers_[b->va] = a;
    return to_generic(*b, dev ? gpu : -1, kind, bytes);
  }

  Status free(const conccl::Buffer& buffer) override {
    if (compute_allocs_.count(buffer.va)) return free_for_compute(buffer);
    if (auto c = cells_.find(buffer.va); c != cells_.end()) {
      cells_.erase(c);
      free_cells_.push_back(buffer.va);
      return Status();
    }
    auto it = buffers_.find(buffer.va);
    if (it == buffers_.end())
      return error(Code::not_found, "buffer at va " + hex(buffer.va) +
                                        " was not allocated by this nv device or is already freed");
    Alloc a = it->second;
    buffers_.erase(it);
    return unregister_and_release(a);
  }

  Result<std::unique_ptr<Queue>> create_queue(int gpu, int engine, const QueueOptions& opt) override {
    if (gpu < 0 || static_cast<size_t>(gpu) >= devs_.size())
      return error(Code::invalid_argument, "queue on gpu " + std::to_string(gpu) + ": this nv device has " +
                                               std::to_string(devs_.size()) + " GPU(s)");
    Result<std::unique_ptr<GpfifoQueue>> q = devs_[static_cast<size_t>(gpu)]->create_queue(engine, opt.ring_bytes, gpu);
    if (!q.ok()) return q.status();
    return std::unique_ptr<Queue>(std::move(q).value());
  }

  void* host_pointer(uint64_t va, size_t bytes) override {
    if (const nv::Allocation* page = find(pool_pages_, va, bytes)) return static_cast<uint8_t*>(page->host) + (va - page->va);
    if (const Import* im = find_import(va, bytes)) return im->host ? static_cast<uint8_t*>(im->host) + (va - im->va) : nullptr;
    const nv::Allocation* b = find(buffers_, va, bytes);
    if (!b || !b->host) return nullptr;
    return static_cast<uint8_t*>(b->host) + (va - b->va);
  }

  bool is_mapped(uint64_t va, size_t bytes) override {
    if (find(buffers_, va, bytes) || find(pool_pages_, va, bytes) || find_import(va, bytes)) return true;
    // A range over several adjacent allocations or imports: CUDA memory of
    // several allocations in the window (register_cuda_in_window), here or
    // imported from the rank that registered it.
    const uint64_t end = va + (bytes ? bytes : 1);
    uint64_t p = va;
    while (p < end) {
      if (const Alloc* a = find_alloc(p, 1)) p = a->own.va + a->own.size;
      else if (const Import* im = find_import(p, 1)) p = im->va + im->size;
      else break;
    }
    if (p >= end) return true;
    // CUDA memory: registered with every GPU (register_cuda below).
    return devs_[0]->is_registered(va, bytes ? bytes : 1);
  }

  size_t gpus() const { return devs_.size(); }
  nv::Gpu& native(size_t gpu) { return *devs_[gpu]; }

  // Ranks in separate processes: CUDA's addresses often coincide between
  // processes, so one process could not map another's CUDA memory at its
  // owner's address. There, CUDA memory is imported into the data window of
  // its GPU (a slot address) instead, and kept shareable: the buffer's va is
  // that address, not CUDA's pointer. A range over several CUDA allocations
  // (a tensor of PyTorch's expandable segments) is imported as one
  // contiguous range, one Alloc per allocation. Returns the va of ptr.
  Result<uint64_t> register_cuda_in_window(uint64_t ptr, size_t bytes, int gpu) {
    if (gpu < 0 || static_cast<size_t>(gpu) >= devs_.size())
      return error(Code::invalid_argument, "register_cuda for GPU " + std::to_string(gpu));
    if (bytes == 0) return error(Code::invalid_argument, "register_cuda of 0 bytes");
    nv::Gpu& owner = *devs_[static_cast<size_t>(gpu)];
    // The CUDA allocations under [ptr, ptr+bytes), in order.
    std::vector<nv::Gpu::CudaAllocation> pieces;
    struct CloseAll {
      std::vector<nv::Gpu::CudaAllocation>* p;
      ~CloseAll() {
        for (const auto& c : *p) ::close(c.fd);
      }
    } close_all{&pieces};
    for (uint64_t p = ptr; p < ptr + bytes;) {
      Result<nv::Gpu::CudaAllocation> ca = owner.export_cuda(p);
      if (!ca.ok()) return ca.status();
      pieces.push_back(*ca);
      p = ca->base + ca->size;
    }
    const uint64_t first = pieces.front().base;
    // Registered before with this layout: count the references again.
    for (auto& [va, a0] : buffers_) {
      if (a0.cuda_base != first) continue;
      std::vector<Alloc*> same;
      for (const auto& c : pieces) {
        auto it = buffers_.find(a0.own.va + (c.base - first));
        if (it == buffers_.end() || it->second.cuda_base != c.base) break;
        same.push_back(&it->second);
      }
      if (same.size() != pieces.size()) continue;
      for (Alloc* a : same) ++a->cuda_refs;
      return a0.own.va + (ptr - first);
    }
    Result<std::vector<nv::Allocation>> own = owner.import_span_in_window(pieces);
    if (!own.ok()) return own.status().prefix("registering CUDA memory at " + hex(ptr));
    std::vector<Alloc> made;
    Status st;
    for (size_t k = 0; k < pieces.size(); ++k) {
      Alloc a{gpu, (*own)[k], {}};
      a.cuda_base = pieces[k].base;
      a.cuda_refs = 1;
      for (size_t g = 0; g < devs_.size() && st.ok(); ++g) {
        if (static_cast<int>(g) == gpu) continue;
        Result<nv::Allocation> v = devs_[g]->import_fd(pieces[k].fd, a.own.va, a.own.size);
        if (v.ok()) a.views.push_back({g, *v});
        else st = v.status().prefix("mapping CUDA memory " + hex(ptr) + " into the other GPUs");
      }
      made.push_back(a);
    }
    if (!st.ok()) {
      for (Alloc& a : made) (void)release(a);
      return st;
    }
    for (Alloc& a : made) {
      a.serial = next_serial_++;
      buffers_[a.own.va] = a;
    }
    return made.front().own.va + (ptr - first);
  }
  // Drops one reference of every CUDA allocation under [va, va+bytes).
  Status unregister_cuda_in_window(uint64_t va, size_t bytes) {
    std::vector<uint64_t> keys;
    for (uint64_t p = va; p < va + (bytes ? bytes : 1);) {
      const Alloc* found = find_alloc(p, 1);
      if (!found || !found->cuda_base)
        return error(Code::not_found, "buffer " + hex(p) + " is not registered CUDA memory of this device");
      keys.push_back(found->own.va);
      p = found->own.va + found->own.size;
    }
    Status first;
    for (uint64_t k : keys) {
      Alloc& a = buffers_[k];
      if (--a.cuda_refs > 0) continue;
      Alloc copy = a;
      buffers_.erase(k);
      Status st = release(copy);
      if (first.ok() && !st.ok()) first = st;
    }
    return first;
  }

  // CUDA memory is imported into every GPU's client: its own GPU maps it
  // locally, the others with a peer mapping (nv::Gpu::import_fd).
  Status register_cuda(uint64_t ptr, size_t bytes) {
    for (size_t i = 0; i < devs_.size(); ++i) {
      Status st = devs_[i]->register_cuda(ptr, bytes);
      if (!st.ok()) {
        for (size_t j = 0; j < i; ++j) (void)devs_[j]->unregister_cuda(ptr, bytes);
        return devs_.size() > 1 ? st.prefix("registering with GPU " + std::to_string(i)) : st;
      }
    }
    return Status();
  }
  Status unregister_cuda(uint64_t ptr, size_t bytes) {
    Status first;
    for (auto& d : devs_) {
      Status st = d->unregister_cuda(ptr, bytes);
      if (first.ok() && !st.ok()) first = st;
    }
    return first;
  }

  Status share_with_cuda() {
    if (cuda_shared_) return Status();
    for (auto& d : devs_) CONCCL_RETURN_IF_ERROR(d->share_slots_with_cuda());
    std::vector<void*> done;
    auto undo = [&] {
      for (void* p : done) (void)devs_[0]->cuda_host_unregister(p);
    };
    for (auto* m : {&pool_pages_, &buffers_})
      for (auto& [va, a] : *m)
        if (a.own.kind == nv::Placement::host) {
          Status st = devs_[0]->cuda_host_register(a.own.host, a.own.size);
          if (!st.ok()) {
            undo();
            return st;
          }
          done.push_back(a.own.host);
        }
    cuda_shared_ = true;
    return Status();
  }

 private:
  // One allocation: the owner's buffer, and its mapping in every other GPU's
  // client (device memory: imported from an export fd; host memory: the same
  // pages registered there).
  struct View {
    size_t gpu;
    nv::Allocation buffer;
  };
  struct Alloc {
    int owner = 0;
    nv::Allocation own;
    std::vector<View> views;
    uint64_t cuda_base = 0;  // CUDA memory imported into the window: CUDA's address of it
    int cuda_refs = 0;
    uint64_t serial = 0;     // this allocation among all of the device's (SharedRegion::serial)
  };
  uint64_t next_serial_ = 1;

  Status map_everywhere(Alloc& a) {
    if (devs_.size() == 1) return Status();
    int fd = -1;
    if (a.own.kind == nv::Placement::device) {
      Result<int> f = devs_[static_cast<size_t>(a.owner)]->export_fd(a.own);
      if (!f.ok()) return f.status();
      fd = *f;
    }
    Status st;
    for (size_t g = 0; g < devs_.size() && st.ok(); ++g) {
      if (static_cast<int>(g) == a.owner) continue;
      Result<nv::Allocation> v = fd >= 0 ? devs_[g]->import_fd(fd, a.own.va, a.own.size)
                                     : devs_[g]->map_host(a.own.host, a.own.size);
      if (v.ok()) a.views.push_back({g, *v});
      else st = v.status().prefix("mapping GPU " + std::to_string(a.owner) + "'s " +
                                  (fd >= 0 ? "device" : "host") + " memory " + hex(a.own.va) + " into GPU " +
                                  std::to_string(g));
    }
    if (fd >= 0) ::close(fd);
    return st;
  }

  // A buffer or cell page that goes: host memory registered with CUDA is
  // unregistered first, else CUDA keeps the old pages pinned under that
  // address, and a later device's memory there is refused
  // (ALREADY_REGISTERED: run 42 on the H200).
  Status unregister_and_release(Alloc& a) {
    if (cuda_shared_ && a.own.kind == nv::Placement::host) (void)devs_[0]->cuda_host_unregister(a.own.host);
    return release(a);
  }

  Status release(Alloc& a) {
    Status first;
    for (View& v : a.views) {
      Status st = devs_[v.gpu]->free(v.buffer);
      if (first.ok() && !st.ok()) first = st;
    }
    a.views.clear();
    if (a.own.handle) {
      Status st = devs_[static_cast<size_t>(a.owner)]->free(a.own);
      if (first.ok() && !st.ok()) first = st;
    }
    return first;
  }

  static conccl::Buffer to_generic(const nv::Allocation& b, int gpu, conccl::MemKind kind, size_t bytes) {
    conccl::Buffer out;
    out.va = b.va;
    out.host = b.host;
    out.size = bytes;
    out.gpu = gpu;
    out.kind = kind;
    out.id = b.handle;
    return out;
  }

  Result<conccl::Buffer> alloc_cell() {
    if (free_cells_.empty()) {
      Result<nv::Allocation> page = devs_[0]->alloc(kPoolPage, nv::Placement::host);
      if (!page.ok()) return page.status();
      Alloc a{0, *page, {}};
      Status st = cuda_shared_ ? devs_[0]->cuda_host_register(page->host, page->size) : Status();
      if (st.ok()) st = map_everywhere(a);
      if (!st.ok()) {
        (void)release(a);
        return st;
      }
      a.serial = next_serial_++;
      pool_pages_[page->va] = a;
      for (size_t off = kPoolPage; off > 0; off -= kCell) free_cells_.push_back(page->va + off - kCell);
    }
    const uint64_t va = free_cells_.back();
    free_cells_.pop_back();
    cells_.insert(va);
    void* host = host_pointer(va, kCell);
    std::memset(host, 0, kCell);
    conccl::Buffer out;
    out.va = va;
    out.host = host;
    out.size = kCell;
    out.gpu = -1;
    out.kind = conccl::MemKind::host;
    out.id = va;
    return out;
  }

  static const nv::Allocation* find(const std::map<uint64_t, Alloc>& m, uint64_t va, size_t bytes) {
    auto it = m.upper_bound(va);
    if (it == m.begin()) return nullptr;
    --it;
    const nv::Allocation& b = it->second.own;
    return va >= b.va && va + bytes <= b.va + b.size ? &b : nullptr;
  }

  static std::string hexs(uint32_t v) {
    char b[16];
    std::snprintf(b, sizeof b, "%x", v);
    return b;
  }

  std::vector<std::unique_ptr<nv::Gpu>> devs_;
  Topology topo_;
  std::map<uint64_t, Alloc> buffers_;     // by va
  std::map<uint64_t, Alloc> pool_pages_;  // by va
  // Memory of other processes (import_shared), by va.
  struct Import {
    uint64_t va = 0, size = 0;
    conccl::MemKind kind = conccl::MemKind::host;
    void* host = nullptr;
    std::vector<View> views;
    uint64_t serial = 0;
  };
  std::map<uint64_t, Import> imports_;
  int slot_ = -1;
  const Import* find_import(uint64_t va, size_t bytes) const {
    auto it = imports_.upper_bound(va);
    if (it == imports_.begin()) return nullptr;
    --it;
    return va >= it->second.va && va + bytes <= it->second.va + it->second.size ? &it->second : nullptr;
  }
  const Alloc* find_alloc(uint64_t va, size_t bytes) const {
    for (const auto* m : {&buffers_, &pool_pages_}) {
      auto it = m->upper_bound(va);
      if (it == m->begin()) continue;
      --it;
      const nv::Allocation& b = it->second.own;
      if (va >= b.va && va + bytes <= b.va + b.size) return &it->second;
    }
    return nullptr;
  }
  void drop_import(Import& im) {
    for (View& v : im.views) (void)devs_[v.gpu]->free(v.buffer);
    im.views.clear();
    if (im.va) munmap(reinterpret_cast<void*>(im.va), im.size);
    im.va = 0;
  }
  std::set<uint64_t> cells_;              // cells handed out
  std::vector<uint64_t> free_cells_;
  bool cuda_shared_ = false;
};

// The GenericDevice behind `device`, or null for another backend's device.
inline GenericDevice* generic(conccl::Device& device) { return dynamic_cast<GenericDevice*>(&device); }

// The error of an nv-only call given another backend's device.
inline Status not_nv(const char* what) {
  return error(Code::unavailable, std::string(what) + " needs a device from open_device({.backend = \"nv\"})");
}

}  // namespace conccl::nv
