// src/backends/emu/node.cpp - arenas, engines and address translation.
#include "backends/emu/node.hpp"

namespace conccl::emu {

Node::Node(Topology topo, size_t host_bytes, size_t gpu_bytes)
    : topo_(std::move(topo)), host_bytes_(host_bytes), gpu_bytes_(gpu_bytes) {}

Node::~Node() { stop_engines(); }

Status Node::init() {
  Result<std::unique_ptr<Arena>> host =
      Arena::create("host", kHostVaBase, host_bytes_,
                    "free buffers, or allocate less (the emulated host memory is " +
                        std::to_string(host_bytes_ >> 20) + " MiB)");
  if (!host.ok()) return host.status();
  host_ = std::move(host).value();
  Result<std::unique_ptr<Arena>> ch = Arena::create("channels", kChannelVaBase, kChannelArenaBytes);
  if (!ch.ok()) return ch.status();
  channels_ = std::move(ch).value();
  for (const GpuInfo& g : topo_.gpus) {
    Result<std::unique_ptr<Arena>> a =
        Arena::create("gpu" + std::to_string(g.index), kGpuVaBase + uint64_t(g.index) * kGpuVaStride, gpu_bytes_,
                      "free buffers, allocate less, or open the emulator with more memory per GPU "
                      "(DeviceOptions::memory_per_gpu; conccl_device_options.memory_per_gpu in C)");
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

void* Node::translate(uint64_t va, uint64_t bytes) const {
  if (void* p = host_->translate(va, bytes)) return p;
  if (void* p = channels_->translate(va, bytes)) return p;
  if (va < kGpuVaBase) return nullptr;
  const uint64_t g = (va - kGpuVaBase) / kGpuVaStride;
  if (g >= gpus_.size()) return nullptr;
  return gpus_[g]->translate(va, bytes);
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
