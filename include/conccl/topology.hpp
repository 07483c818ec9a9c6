// conccl/topology.hpp - what a backend reports about its GPUs, engines and links.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "conccl/commands.hpp"
#include "conccl/status.hpp"

namespace conccl {

enum class EngineKind : uint8_t {
  pcie,  // SDMA engine optimised for host (PCIe) traffic
  xgmi,  // SDMA engine optimised for GPU-to-GPU (xGMI) traffic
  copy,  // NVIDIA asynchronous copy engine (LCE), name "ce"; weight = its PCE count
};
const char* engine_kind_name(EngineKind k);

struct EngineInfo {
  int id = 0;  // engine id as the driver numbers them (KFD sdma_engine_id, NVIDIA LCE index)
  EngineKind kind = EngineKind::pcie;
  double weight = 1.0;  // relative copy bandwidth, for striping (NVIDIA: PCE count)
};

struct LinkInfo {
  int peer = 0;                          // GPU index of the other end
  std::string type;                      // "xgmi" or "pcie"
  uint32_t weight = 0;                   // KFD io_link weight (lower is closer)
  std::vector<int> recommended_engines;  // engines of *this* GPU best for copies to peer
};

struct GpuInfo {
  int index = 0;
  // The GPU's identity across the whole node: the same number in every
  // process, whichever GPUs each one sees (per-rank isolation through cgroups,
  // Slurm, Kubernetes or --device hides the others and renumbers `index`).
  // KFD: its gpu_id (sysfs topology/nodes/N/gpu_id); NVIDIA: RM's gpuId; the
  // emulator: 1 + its index in the emulated node. 0 = not known.
  uint64_t node_gpu_id = 0;
  std::string name;       // "gfx942", "NVIDIA H200" or a preset's label
  Isa isa;                // what its engines execute (SDMA generation, Hopper CE)
  uint64_t memory_bytes = 0;
  // Memory the driver stack sets aside with each queue created on this GPU,
  // beside the ring (KFD: the CWSR area libhsakmt allocates for by-engine-id
  // SDMA queues; the topology notes say how it was found); 0 = none or not known.
  uint64_t per_queue_bytes = 0;
  std::vector<EngineInfo> engines;
  std::vector<LinkInfo> links;

  const Caps& caps() const { return conccl::caps(isa); }
  const LinkInfo* link_to(int peer) const {
    for (const LinkInfo& l : links)
      if (l.peer == peer) return &l;
    return nullptr;
  }
};

struct Topology {
  std::string backend;  // "emu", "kfd", "nv"
  std::string preset;   // emu: the preset name
  std::vector<GpuInfo> gpus;
  // The GPU whose GpuInfo::node_gpu_id is `id`, or null where this process
  // does not see it (or id is 0: not known).
  const GpuInfo* gpu_with_node_id(uint64_t id) const {
    for (const GpuInfo& g : gpus)
      if (id != 0 && g.node_gpu_id == id) return &g;
    return nullptr;
  }
  // Backend remarks, one line each (kfd: the queue mode in force and why,
  // skipped GPUs, fallbacks taken). Printed by topology_table/json.
  std::vector<std::string> notes;
};

// The engines of `gpu` suited to copies toward GPU `peer` (peer == gpu: local
// copies), best first: the link's recommended engines (KFD's
// rec_sdma_eng_map on MI300X), then xGMI engines, then PCIe engines, then
// copy engines heaviest (most PCEs) first. Errors: not_found for a GPU
// outside the topology.
Result<std::vector<int>> engines_toward(const Topology& t, int gpu, int peer);

// Human-readable table and JSON (the `sdma-probe list` formats).
std::string topology_table(const Topology& t);
std::string topology_json(const Topology& t);

}  // namespace conccl
