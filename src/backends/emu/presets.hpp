// src/backends/emu/presets.hpp - topologies the emulated node can take.
#pragma once

#include "conccl/device.hpp"

namespace conccl::emu {

// Builds the topology for options (preset + overrides).
Result<Topology> build_topology(const DeviceOptions& options);
// Whether engine `lce` of an h200-preset topology is a graphics CE (refused).
bool is_grce(const Topology& t, int lce);

}  // namespace conccl::emu
