// tools/sdma-probe/device_flags.hpp - opening the backend a command runs on:
// --backend/--preset (shared) plus the emulator's --gpus, --engines, --sdma-gen.
#pragma once

#include <memory>
#include <vector>

#include "cli.hpp"
#include "conccl/device.hpp"

namespace probe {

// The emulator's limits, and the most GPUs any command addresses.
inline constexpr int kMaxGpus = 64;
inline constexpr int kMaxEngines = 32;
// The largest engine id a flag accepts before the device says which exist
// (NVIDIA copy engines are numbered by LCE, not densely).
inline constexpr int kMaxEngineId = 255;

// --gpus N, --engines K, --sdma-gen G (emulator topology overrides).
std::vector<FlagSpec> device_flag_specs();

// Opens the device the flags describe. Errors carry Code::unavailable when
// the backend is missing here (exit 5) and invalid_argument for bad flags.
// process_slot: DeviceOptions::process_slot (a --procs rank gives its rank).
conccl::Result<std::unique_ptr<conccl::Device>> open_device_from_args(const Args& args, int process_slot = -1);

}  // namespace probe
