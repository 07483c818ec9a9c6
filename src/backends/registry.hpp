// src/backends/registry.hpp - the backends open_device knows: one row per
// backend (registry.cpp), each opener in its backend's folder. A new backend
// is a folder with its opener and one row.
#pragma once

#include <memory>

#include "conccl/device.hpp"

namespace conccl {

using BackendOpener = Result<std::unique_ptr<Device>> (*)(const DeviceOptions& options);

// The openers (each in src/backends/<name>/open_<name>.cpp): DeviceOptions
// and its settings string into the backend's own Options, then open.
Result<std::unique_ptr<Device>> open_emu_backend(const DeviceOptions& options);
Result<std::unique_ptr<Device>> open_kfd_backend(const DeviceOptions& options);
Result<std::unique_ptr<Device>> open_nv_backend(const DeviceOptions& options);

// What Device::alloc(MemKind::cuda) answers on a backend without CUDA.
Status no_cuda_memory(const char* backend);

}  // namespace conccl
