// src/backends/emu/presets.hpp - topologies the emulated node can take.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "conccl/device.hpp"

namespace conccl::emu {

class EmuDevice;

// The emulator's own options: DeviceOptions::settings' keys (docs/emulator.md)
// once parsed (open_emu.cpp), and the process slot.
struct NodeOptions {
  std::string preset;         // "mi300x", "small", "h200" ("" = mi300x, or small when reshaped)
  int gpus = 0;               // GPUs (0 = the preset's)
  int engines = 0;            // engines per GPU (0 = the preset's)
  std::string gen;            // SDMA generation of the emulated GPUs ("" = the preset's)
  size_t memory_per_gpu = 0;  // HBM arena per GPU in bytes (0 = default)
  int process_slot = -1;      // DeviceOptions::process_slot
  // The GPUs of the emulated node this process sees, as per-rank isolation
  // (cgroups, Slurm, Kubernetes, --device) leaves them: indices renumbered
  // from 0, links to the hidden ones gone, node_gpu_id kept. Empty: all.
  std::vector<int> visible;
  // Whether Device::host_pointer finds GPU memory (emulated HBM, this
  // process's or another's). 0 models a GPU whose memory the host has no
  // mapping of, as CUDA memory on the nv backend: host_pointer() is null
  // there, while engines (and compute_pointer, the emulated compute) still
  // reach it; Buffers from alloc keep their pointer, for tests to fill and
  // check.
  bool host_maps_gpu_memory = true;
};

// DeviceOptions' settings into NodeOptions; errors name a bad or unknown
// key (open_emu.cpp).
Result<NodeOptions> node_options(const DeviceOptions& options);

// Creates the emulated node (device.cpp).
Result<std::unique_ptr<EmuDevice>> create_node(const NodeOptions& options);

// Builds the topology for options (preset + overrides).
Result<Topology> build_topology(const NodeOptions& options);
// Whether engine `lce` of an h200-preset topology is a graphics CE (refused).
bool is_grce(const Topology& t, int lce);

}  // namespace conccl::emu
