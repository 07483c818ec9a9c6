// src/backends/emu/node.cpp - arenas, engines and address translation.
#include "backends/emu/node.hpp"

#include <unistd.h>

namespace conccl::emu {


Node::Node(Topology topo, size_t host_bytes, size_t gpu_bytes, int slot)
    : topo_(std::move(topo)), host_bytes_(host_bytes), gpu_bytes_(gpu_bytes), slot_(slot) {}

Node::~Node() { stop_engines(); }

Status Node::init() {
  Result<std::unique_ptr<Arena>> host =
      Arena::create("host" + slot_suffix(), kHostVaBase + slot_base(), host_bytes_,
                    "free buffers, or allocate less (the emulated host memory is " +
                        std::to_string(host_bytes_ >> 20) + " MiB)");
  if (!host.ok()) return host.status();
  host_ = std::move(host).value();
  Result<std::unique_ptr<Arena>> ch = Arena::create("channels", kChannelVaBase, kChannelArenaBytes);
  if (!ch.ok()) return ch.status();
  channels_ = std::move(ch).value();
  for (const GpuInfo& g : topo_.gpus) {
    Result<std::unique_ptr<Arena>> a =
        Arena::create("gpu" + std::to_string(g.index) + slot_suffix(),
                      kGpuVaBase + slot_base() + uint64_t(g.index) * kGpuVaStride, gpu_bytes_,
                      "free buffers, allocate less, or open the emulator with more memory per GPU "
                      "(the emulator setting memory_per_gpu, e.g. DeviceOptions::settings \"memory_per_gpu=8G\"; "
                      "conccl_device_options.settings in C)");
    if (!a.ok()) return a.status();
    gpus_.push_back(std::move(a).value());
    std::vector<std::unique_ptr<Engine>> engines;
    for (const EngineInfo& e : g.engines) engines.push_back(std::make_unique<Engine>(*this, g.index, e.id, g.isa));
    engines_.push_back(std::move(engines));
  }
  return Status();
}

Engine* Node::engine(int gpu, int id) {
  if (gpu < 0 || gpu >= static_cast<int>(engines_.size())) return nullptr;
  auto& list = engines_[static_cast<size_t>(gpu)];
  const auto& infos = topo_.gpus[static_cast<size_t>(gpu)].engines;
  for (size_t i = 0; i < infos.size(); ++i)
    if (infos[i].id == id) return list[i].get();
  return nullptr;
}

void* Node::lookup(uint64_t va, uint64_t bytes, bool gpu_memory) const {
  if (void* p = host_->translate(va, bytes)) return p;
  if (void* p = channels_->translate(va, bytes)) return p;
  const uint64_t gpu_base = kGpuVaBase + slot_base();
  if (gpu_memory && va >= gpu_base) {
    const uint64_t g = (va - gpu_base) / kGpuVaStride;
    if (g < gpus_.size())
      if (void* p = gpus_[g]->translate(va, bytes)) return p;
  }
  const size_t n = import_count_.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i)
    if (gpu_memory || !import_gpu_[i])
      if (void* p = imports_[i].load(std::memory_order_relaxed)->translate(va, bytes)) return p;
  return nullptr;
}

Arena* Node::own_arena(uint64_t va, uint64_t bytes) {
  if (host_->contains(va, bytes)) return host_.get();
  for (auto& a : gpus_)
    if (a->contains(va, bytes)) return a.get();
  return nullptr;
}

Status Node::import_arena(const std::string& name, uint64_t va, uint64_t size, int fd, bool gpu_memory) {
  std::lock_guard<std::mutex> lock(import_mu_);
  const size_t n = import_count_.load(std::memory_order_relaxed);
  auto overlaps = [&](const Arena& a) { return va < a.va_base() + a.size() && a.va_base() < va + size; };
  for (size_t i = 0; i < n; ++i) {
    const Arena& a = *imports_[i].load(std::memory_order_relaxed);
    if (a.va_base() == va && a.size() == size) {
      close(fd);  // mapped before: the same memory
      return Status();
    }
    if (overlaps(a)) {
      close(fd);
      return error(Code::invalid_argument, "shared arena " + name + " at " + hex(va) + " overlaps " + a.name() +
                                               " imported before: two processes use one DeviceOptions::process_slot");
    }
  }
  auto own = [&](const Arena& a) {
    return overlaps(a) ? error(Code::invalid_argument,
                               "shared arena " + name + " at " + hex(va) + " overlaps this process's " + a.name() +
                                   ": the two processes opened their devices with the same DeviceOptions::process_slot "
                                   "(" + std::to_string(slot_) + "); give each process its own (its rank)")
                       : Status();
  };
  Status st = own(*host_);
  for (auto& a : gpus_)
    if (st.ok()) st = own(*a);
  if (st.ok()) st = own(*channels_);
  if (!st.ok()) {
    close(fd);
    return st;
  }
  if (n == kMaxImports) {
    close(fd);
    return error(Code::resource_exhausted, "the emulator maps at most " + std::to_string(kMaxImports) +
                                               " arenas of other processes");
  }
  Result<std::unique_ptr<Arena>> a = Arena::map(name, va, size, fd);
  if (!a.ok()) return a.status();
  imports_[n].store(a->get(), std::memory_order_relaxed);
  import_gpu_[n] = gpu_memory;
  import_owner_.push_back(std::move(a).value());
  import_count_.store(n + 1, std::memory_order_release);
  return Status();
}

void Node::memory_changed() {
  if (polling_engines.load(std::memory_order_acquire) == 0) return;
  for (auto& list : engines_)
    for (auto& e : list) e->wake_if_polling();
}

void Node::stop_engines() {
  for (auto& list : engines_)
    for (auto& e : list) e->stop();
}

}  // namespace conccl::emu
