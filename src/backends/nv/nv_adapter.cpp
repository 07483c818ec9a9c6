// src/backends/nv/nv_adapter.cpp - conccl::Device over nv::Gpu: what
// open_device({backend = "nv"}) returns.
//
// One nv::Gpu (RM client) per GPU. topology(): the GPUs (GpuInfo::name =
// the GPU's name, "hopper" if RM does not say) speaking Isa hopper-ce, their
// asynchronous copy engines with channels as EngineKind::copy (id = LCE,
// weight = PCE count), the engines without a channel as notes, and a link
// between every two GPUs. alloc/free/host_pointer: nv::Gpu memory (device
// memory is zeroed by a copy-engine fill and not CPU-mapped; host memory
// is), mapped into every GPU's VA space at one address: device memory
// through an export fd imported by the other clients (a peer mapping when
// the GPUs differ), host pages registered with each. Small host allocations
// - signals, 16 bytes each, a plan makes 2n+1 of them - come from 64 KiB
// pages cut into 64-byte cells, instead of a page and an RM registration
// each. create_queue(gpu, lce): a new GPFIFO channel on that GPU's LCE (its
// own channel group, token and pushbuffer).
#include "backends/nv/nv_adapter.hpp"

namespace conccl::nv {

Status GenericDevice::build_topology() {
  topo_.backend = "nv";
  for (size_t gi = 0; gi < devs_.size(); ++gi) {
    nv::Gpu& d = *devs_[gi];
    GpuInfo g;
    g.index = static_cast<int>(gi);
    g.node_gpu_id = d.info().gpu_id;  // RM's gpuId: node-wide
    g.name = d.info().gpu_name.empty() ? "hopper" : d.info().gpu_name;
    g.isa = Isa::hopper();
    g.memory_bytes = d.info().fb_bytes;
    for (size_t i = 0; i < d.channel_count(); ++i) {
      const Channel& c = d.channel(i);
      EngineInfo e;
      e.id = c.lce();
      e.kind = EngineKind::copy;
      e.weight = c.pces();
      g.engines.push_back(e);
    }
    for (size_t pi = 0; pi < devs_.size(); ++pi) {
      if (pi == gi) continue;
      const nv::Gpu& p = *devs_[pi];
      LinkInfo l;
      l.peer = static_cast<int>(pi);
      if (p.info().gpu_id == d.info().gpu_id) {
        l.type = "same-gpu";
      } else {
        Result<uint32_t> caps = d.p2p_caps(p.info().gpu_id);
        if (!caps.ok()) return caps.status().prefix("peer capabilities of GPU " + std::to_string(gi) + " and " + std::to_string(pi));
        const uint32_t rw = abi::kP2pReads | abi::kP2pWrites;
        if ((*caps & rw) != rw)
          return error(Code::unavailable,
                       "GPUs " + std::to_string(gi) + " and " + std::to_string(pi) +
                           " have no peer access to each other's memory (RM peer capabilities 0x" + hexs(*caps) +
                           "); open them as separate devices (nv::Options::gpus) or enable peer access");
        const bool nvlink = *caps & abi::kP2pNvlink;
        l.type = nvlink ? "nvlink" : "pcie";
        l.weight = nvlink ? 15 : 40;
      }
      g.links.push_back(l);
    }
    topo_.gpus.push_back(std::move(g));
    std::string prefix = devs_.size() > 1 ? "GPU " + std::to_string(gi) + ": " : "";
    topo_.notes.push_back(prefix + "NVIDIA " + d.info().uuid_string() + ", driver " + d.info().driver_version +
                          ", channel class 0x" + hexs(d.info().channel_class) +
                          "; engines are asynchronous LCEs: create_queue(gpu, lce) opens a GPFIFO channel there");
    for (const nv::Engine& e : d.engines())
      if (!e.has_channel)
        topo_.notes.push_back(prefix + "LCE" + std::to_string(e.lce) + " (" + std::to_string(e.pces) + " PCEs): " + e.note);
    // How long waits behave here: asleep on the engine's interrupt, or napping and why.
    std::string on, off;
    for (size_t i = 0; i < d.channel_count(); ++i) {
      nv::Channel& c = d.channel(i);
      if (c.interrupt_waits())
        on += (on.empty() ? "LCE" : ", LCE") + std::to_string(c.lce());
      else
        off += (off.empty() ? "" : "; ") + ("LCE" + std::to_string(c.lce()) + ": " + c.interrupt_note());
    }
    if (!on.empty()) topo_.notes.push_back(prefix + "waits sleep on the copy engine's interrupt: " + on);
    if (!off.empty()) topo_.notes.push_back(prefix + "waits nap instead of sleeping on an interrupt: " + off);
  }
  return Status();
}

Result<std::unique_ptr<conccl::Device>> open_generic(const Options& options) {
  std::vector<int> list = options.gpus;
  if (list.empty()) {
    Result<int> n = gpu_count(options);
    if (!n.ok()) return n.status();
    if (*n == 0) return error(Code::not_found, "the NVIDIA driver lists no GPU");
    for (int i = 0; i < *n; ++i) list.push_back(i);
  }
  if (options.process_slot >= 16)
    return error(Code::invalid_argument, "process_slot " + std::to_string(options.process_slot) + " must be 0..15");
  if (options.process_slot >= 0 && list.size() * options.va_size > kSlotWindowBytes)
    return error(Code::invalid_argument, std::to_string(list.size()) + " data windows of " +
                                             std::to_string(options.va_size >> 30) + " GiB do not fit a process slot (" +
                                             std::to_string(kSlotWindowBytes >> 40) + " TiB): lower Options::va_size");
  std::vector<std::unique_ptr<nv::Gpu>> devs;
  for (size_t i = 0; i < list.size(); ++i) {
    Options o = options;
    o.gpu = list[i];
    o.gpus.clear();
    if (options.process_slot >= 0)
      o.va_base = kSlotWindowBase + uint64_t(options.process_slot) * kSlotWindowBytes + i * options.va_size;
    Result<std::unique_ptr<nv::Gpu>> d = nv::Gpu::open(o);
    if (!d.ok()) return list.size() > 1 ? d.status().prefix("GPU " + std::to_string(i) + " (driver GPU " +
                                                                std::to_string(list[i]) + ")")
                                        : d.status();
    devs.push_back(std::move(d).value());
  }
  std::unique_ptr<GenericDevice> g(new GenericDevice(std::move(devs), options.process_slot));
  CONCCL_RETURN_IF_ERROR(g->build_topology());
  return std::unique_ptr<conccl::Device>(std::move(g));
}

}  // namespace conccl::nv
