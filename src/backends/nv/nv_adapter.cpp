// src/backends/nv/nv_adapter.cpp - conccl::Device over nv::Device, what
// open_device({backend = "nv"}) returns. Part of the conccl library (it
// implements conccl/device.hpp); nv::Device itself lives in conccl_nv.
//
// topology(): one GPU (GpuInfo::name = the GPU's name, "hopper" if RM does
// not say), its asynchronous copy engines with channels as EngineKind::copy
// with weight = PCE count, the engines without a channel as notes. The SDMA
// generation field keeps its default: it means nothing here.
// alloc/free/host_pointer: nv::Device memory (device memory is not
// CPU-mapped; host memory is). create_queue: Code::unavailable - SDMA-style
// queues do not exist on NVIDIA; channels are used through nv::Channel.
#include <algorithm>
#include <cstdio>
#include <map>

#include "conccl/device.hpp"
#include "conccl/nv.hpp"
#include "conccl/queue.hpp"

namespace conccl::nv {

namespace {

class GenericDevice final : public conccl::Device {
 public:
  explicit GenericDevice(std::unique_ptr<nv::Device> d) : dev_(std::move(d)) { build_topology(); }

  const Topology& topology() const override { return topo_; }

  Result<conccl::Buffer> alloc(int gpu, size_t bytes, conccl::MemKind kind) override {
    if (kind == conccl::MemKind::device && gpu != 0)
      return error(Code::not_found, "GPU " + std::to_string(gpu) + " requested; the nv backend opened one GPU (0)");
    if (bytes == 0) return error(Code::invalid_argument, "cannot allocate 0 bytes");
    const bool dev = kind == conccl::MemKind::device;
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
    }
    conccl::Buffer out;
    out.va = b->va;
    out.host = b->host;
    out.size = b->size;
    out.gpu = dev ? 0 : -1;
    out.kind = kind;
    out.id = b->handle;
    buffers_[b->va] = *b;
    return out;
  }

  Status free(const conccl::Buffer& buffer) override {
    auto it = buffers_.find(buffer.va);
    if (it == buffers_.end())
      return error(Code::not_found, "buffer at va " + std::to_string(buffer.va) +
                                        " was not allocated by this nv device or is already freed");
    nv::Buffer b = it->second;
    buffers_.erase(it);
    return dev_->free(b);
  }

  Result<std::unique_ptr<Queue>> create_queue(int, int engine, const QueueOptions&) override {
    return error(Code::unavailable,
                 "the nv backend has no SDMA-style queues: NVIDIA copy engine " + std::to_string(engine) +
                     " is driven through a GPFIFO channel - use conccl::nv::native(device)->channel_for_lce(" +
                     std::to_string(engine) + ") and its copy/fill/signal/wait/submit (docs/nv-backend.md)");
  }

  void* host_pointer(uint64_t va, size_t bytes) override {
    const nv::Buffer* b = find(va, bytes);
    if (!b || !b->host) return nullptr;
    return static_cast<uint8_t*>(b->host) + (va - b->va);
  }

  bool is_mapped(uint64_t va, size_t bytes) override {
    return find(va, bytes) != nullptr || dev_->is_registered(va, bytes ? bytes : 1);
  }

  nv::Device& native() { return *dev_; }

 private:
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
                          "; engines are asynchronous LCEs driven through conccl::nv::Channel (no SDMA queues)");
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
  std::map<uint64_t, nv::Buffer> buffers_;  // by va
};

}  // namespace

Result<std::unique_ptr<conccl::Device>> open_generic(const Options& options) {
  Result<std::unique_ptr<nv::Device>> d = nv::Device::open(options);
  if (!d.ok()) return d.status();
  return std::unique_ptr<conccl::Device>(new GenericDevice(std::move(d).value()));
}

nv::Device* native(conccl::Device& device) {
  auto* g = dynamic_cast<GenericDevice*>(&device);
  return g ? &g->native() : nullptr;
}

}  // namespace conccl::nv
