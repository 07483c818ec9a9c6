// src/open_device.cpp - choose a backend by name.
#include "conccl/device.hpp"
#include "conccl/emu.hpp"

namespace conccl {

Result<std::unique_ptr<Device>> open_device(const DeviceOptions& options) {
  if (options.backend == "emu" || options.backend.empty()) {
    Result<std::unique_ptr<emu::EmuDevice>> d = emu::create(options);
    if (!d.ok()) return d.status();
    return std::unique_ptr<Device>(std::move(d).value());
  }
  if (options.backend == "kfd")
    return error(Code::unavailable,
                 "the KFD backend (AMD GPUs through /dev/kfd) is not part of this build yet; "
                 "use --backend emu");
  if (options.backend == "nv")
    return error(Code::unavailable,
                 "the NVIDIA copy-engine backend is not part of this build yet; use --backend emu");
  return error(Code::invalid_argument, "unknown backend '" + options.backend + "' (emu, kfd, nv)");
}

}  // namespace conccl
