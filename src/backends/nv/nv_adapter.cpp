// src/backends/nv/nv_adapter.cpp - conccl::Device over nv::Device: what
// open_device({backend = "nv"}) returns.
//
// topology(): one GPU (GpuInfo::name = the GPU's name, "hopper" if RM does
// not say) speaking Isa hopper-ce, its asynchronous copy engines with
// channels as EngineKind::copy (id = LCE, weight = PCE count), the engines
// without a channel as notes. alloc/free/host_pointer: nv::Device memory
// (device memory is zeroed by a copy-engine fill and not CPU-mapped; host
// memory is). Small host allocations - signals, 16 bytes each, a plan makes
// 2n+1 of them - come from 64 KiB pages cut into 64-byte cells, instead of a
// page and an RM registration each. create_queue(0, lce): a new GPFIFO
// channel on that LCE (its own channel group, token and pushbuffer).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "backends/nv/nv_device.hpp"
#include "conccl/device.hpp"
#include "conccl/nv.hpp"

namespace conccl::nv {

namespace {

constexpr size_t kCell = 64;            // small host allocations: one cell each
constexpr size_t kPoolPage = 64 << 10;  // cells come from pages of this size

class GenericDevice final : public conccl::Device {
 public:
  explicit GenericDevice(std::unique_ptr<nv::Device> d) : dev_(std::move(d)) { build_topology(); }
  ~GenericDevice() override {
    for (auto& [va, b] : pool_pages_) (void)dev_->free(b);
  }

  const Topology& topology() const override { return topo_; }

  Result<conccl::Buffer> alloc(int gpu, size_t bytes, conccl::MemKind kind) override {
    if (kind == conccl::MemKind::device && gpu != 0)
      return error(Code::not_found, "GPU " + std::to_string(gpu) + " requested; the nv backend opened one GPU (0)");
    if (bytes == 0) return error(Code::invalid_argument, "cannot allocate 0 bytes");
    const bool dev = kind == conccl::MemKind::device;
    if (!dev && bytes <= kCell) return alloc_cell();
    Result<nv::Buffer> b = dev_->alloc(bytes, dev ? nv::MemKind::device : nv::MemKind::host);
    if (!b.ok()) return b.status();
    if (dev) {
      // conccl::Device promises zeroed memory: clear it with the first channel.
      Channel& ch = dev_->channel(0);
      uint64_t f = 0;
      const Deadline dl = Deadline::after_ms(10000);
      Status st = ch.fill(b->va, 0, b->size);
      if (st.ok()) st = ch.submit(dl, &f);
      if (st.ok()) st = ch.wait_done(dl, f);
      if (!st.ok()) {
        nv::Buffer tmp = *b;
        (void)dev_->free(tmp);
        return st.prefix("zeroing " + std::to_string(bytes) + " bytes of device memory");
      }
    } else if (cuda_shared_) {
      CONCCL_RETURN_IF_ERROR(dev_->cuda_host_register(b->host, b->size));
    }
    buffers_[b->va] = *b;
    return to_generic(*b, dev ? 0 : -1, kind, bytes);
  }

  Status free(const conccl::Buffer& buffer) override {
    if (auto c = cells_.find(buffer.va); c != cells_.end()) {
      cells_.erase(c);
      free_cells_.push_back(buffer.va);
      return Status();
    }
    auto it = buffers_.find(buffer.va);
    if (it == buffers_.end())
      return error(Code::not_found, "buffer at va " + hex(buffer.va) +
                                        " was not allocated by this nv device or is already freed");
    nv::Buffer b = it->second;
    buffers_.erase(it);
    if (cuda_shared_ && b.kind == nv::MemKind::host) (void)dev_->cuda_host_unregister(b.host);
    return dev_->free(b);
  }

  Result<std::unique_ptr<Queue>> create_queue(int gpu, int engine, const QueueOptions& opt) override {
    if (gpu != 0)
      return error(Code::invalid_argument, "queue on gpu " + std::to_string(gpu) +
                                               ": the nv backend opened one GPU (0)");
    Result<std::unique_ptr<GpfifoQueue>> q = dev_->create_queue(engine, opt.ring_bytes, 0);
    if (!q.ok()) return q.status();
    return std::unique_ptr<Queue>(std::move(q).value());
  }

  void* host_pointer(uint64_t va, size_t bytes) override {
    if (const nv::Buffer* page = find_pool_page(va, bytes)) return static_cast<uint8_t*>(page->host) + (va - page->va);
    const nv::Buffer* b = find(va, bytes);
    if (!b || !b->host) return nullptr;
    return static_cast<uint8_t*>(b->host) + (va - b->va);
  }

  bool is_mapped(uint64_t va, size_t bytes) override {
    return find(va, bytes) != nullptr || find_pool_page(va, bytes) != nullptr ||
           dev_->is_registered(va, bytes ? bytes : 1);
  }

  nv::Device& native() { return *dev_; }

  Status share_with_cuda() {
    if (cuda_shared_) return Status();
    CONCCL_RETURN_IF_ERROR(dev_->share_slots_with_cuda());
    std::vector<void*> done;
    auto undo = [&] {
      for (void* p : done) (void)dev_->cuda_host_unregister(p);
    };
    for (auto& [va, b] : pool_pages_) {
      Status st = dev_->cuda_host_register(b.host, b.size);
      if (!st.ok()) {
        undo();
        return st;
      }
      done.push_back(b.host);
    }
    for (auto& [va, b] : buffers_)
      if (b.kind == nv::MemKind::host) {
        Status st = dev_->cuda_host_register(b.host, b.size);
        if (!st.ok()) {
          undo();
          return st;
        }
        done.push_back(b.host);
      }
    cuda_shared_ = true;
    return Status();
  }

 private:
  static conccl::Buffer to_generic(const nv::Buffer& b, int gpu, conccl::MemKind kind, size_t bytes) {
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
      Result<nv::Buffer> page = dev_->alloc(kPoolPage, nv::MemKind::host);
      if (!page.ok()) return page.status();
      if (cuda_shared_) {
        Status st = dev_->cuda_host_register(page->host, page->size);
        if (!st.ok()) {
          nv::Buffer tmp = *page;
          (void)dev_->free(tmp);
          return st;
        }
      }
      pool_pages_[page->va] = *page;
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

  const nv::Buffer* find_pool_page(uint64_t va, size_t bytes) const {
    auto it = pool_pages_.upper_bound(va);
    if (it == pool_pages_.begin()) return nullptr;
    --it;
    const nv::Buffer& b = it->second;
    return va >= b.va && va + bytes <= b.va + b.size ? &b : nullptr;
  }

  const nv::Buffer* find(uint64_t va, size_t bytes) const {
    auto it = buffers_.upper_bound(va);
    if (it == buffers_.begin()) return nullptr;
    --it;
    const nv::Buffer& b = it->second;
    return va >= b.va && va + bytes <= b.va + b.size ? &b : nullptr;
  }

  void build_topology() {
    topo_.backend = "nv";
    GpuInfo g;
    g.index = 0;
    g.name = dev_->info().gpu_name.empty() ? "hopper" : dev_->info().gpu_name;
    g.isa = Isa::hopper();
    g.memory_bytes = dev_->info().fb_bytes;
    for (size_t i = 0; i < dev_->channel_count(); ++i) {
      const Channel& c = dev_->channel(i);
      EngineInfo e;
      e.id = c.lce();
      e.kind = EngineKind::copy;
      e.weight = c.pces();
      g.engines.push_back(e);
    }
    topo_.gpus.push_back(std::move(g));
    topo_.notes.push_back("NVIDIA " + dev_->info().uuid_string() + ", driver " + dev_->info().driver_version +
                          ", channel class 0x" + hexs(dev_->info().channel_class) +
                          "; engines are asynchronous LCEs: create_queue(0, lce) opens a GPFIFO channel there");
    for (const nv::Engine& e : dev_->engines())
      if (!e.has_channel)
        topo_.notes.push_back("LCE" + std::to_string(e.lce) + " (" + std::to_string(e.pces) + " PCEs): " + e.note);
    // How long waits behave here: asleep on the engine's interrupt, or napping and why.
    std::string on, off;
    for (size_t i = 0; i < dev_->channel_count(); ++i) {
      nv::Channel& c = dev_->channel(i);
      if (c.interrupt_waits())
        on += (on.empty() ? "LCE" : ", LCE") + std::to_string(c.lce());
      else
        off += (off.empty() ? "" : "; ") + ("LCE" + std::to_string(c.lce()) + ": " + c.interrupt_note());
    }
    if (!on.empty()) topo_.notes.push_back("waits sleep on the copy engine's interrupt: " + on);
    if (!off.empty()) topo_.notes.push_back("waits nap instead of sleeping on an interrupt: " + off);
  }

  static std::string hexs(uint32_t v) {
    char b[16];
    std::snprintf(b, sizeof b, "%x", v);
    return b;
  }

  std::unique_ptr<nv::Device> dev_;
  Topology topo_;
  std::map<uint64_t, nv::Buffer> buffers_;     // by va
  std::map<uint64_t, nv::Buffer> pool_pages_;  // by va
  std::set<uint64_t> cells_;                   // cells handed out
  std::vector<uint64_t> free_cells_;
  bool cuda_shared_ = false;
};

GenericDevice* generic(conccl::Device& device) { return dynamic_cast<GenericDevice*>(&device); }

Status not_nv(const char* what) {
  return error(Code::unavailable, std::string(what) + " needs a device from open_device({.backend = \"nv\"})");
}

}  // namespace

Result<std::unique_ptr<conccl::Device>> open_generic(const Options& options) {
  Result<std::unique_ptr<nv::Device>> d = nv::Device::open(options);
  if (!d.ok()) return d.status();
  return std::unique_ptr<conccl::Device>(new GenericDevice(std::move(d).value()));
}

nv::Device* native(conccl::Device& device) {
  GenericDevice* g = generic(device);
  return g ? &g->native() : nullptr;
}

Result<conccl::Buffer> register_cuda(conccl::Device& device, uint64_t ptr, size_t bytes, int gpu) {
  GenericDevice* g = generic(device);
  if (!g) return not_nv("register_cuda");
  if (gpu != 0) return error(Code::invalid_argument, "the nv backend opened one GPU (0)");
  CONCCL_RETURN_IF_ERROR(g->native().register_cuda(ptr, bytes));
  conccl::Buffer b;
  b.va = ptr;
  b.size = bytes;
  b.gpu = 0;
  b.kind = conccl::MemKind::device;
  b.id = ptr;
  return b;
}

Status unregister_cuda(conccl::Device& device, const conccl::Buffer& buffer) {
  GenericDevice* g = generic(device);
  if (!g) return not_nv("unregister_cuda");
  return g->native().unregister_cuda(buffer.va, buffer.size);
}

Status share_signals_with_cuda(conccl::Device& device) {
  GenericDevice* g = generic(device);
  if (!g) return not_nv("share_signals_with_cuda");
  return g->share_with_cuda();
}

}  // namespace conccl::nv
