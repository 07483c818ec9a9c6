// src/backends/emu/presets.hpp - topologies the emulated node can take.
#pragma once

#include "conccl/device.hpp"

namespace conccl::emu {

// Builds the topology for options (preset + overrides).
Result<Topology> build_topology(const DeviceOptions& options);

}  // namespace conccl::emu
