// src/open_device.cpp - choose a backend by name.
#include "conccl/device.hpp"
#include "conccl/emu.hpp"
#include "conccl/kfd.hpp"
#include "conccl/nv.hpp"

#include <cstdlib>
#include <string>

namespace conccl {

Result<std::unique_ptr<Device>> open_device(const DeviceOptions& options) {
  if (options.backend == "emu" || options.backend.empty()) {
    Result<std::unique_ptr<emu::EmuDevice>> d = emu::create(options);
    if (!d.ok()) return d.status();
    return std::unique_ptr<Device>(std::move(d).value());
  }
  if (options.backend == "kfd") {
    // AMD GPUs through /dev/kfd and libhsakmt (docs/hardware.md). Errors say
    // why the backend cannot run here and what to do.
    kfd::Options o;
    o.process_slot = options.process_slot;
    Result<std::unique_ptr<kfd::KfdDevice>> d = kfd::open(o);
    if (!d.ok()) return d.status();
    return std::unique_ptr<Device>(std::move(d).value());
  }
  if (options.backend == "nv") {
    // NVIDIA Hopper copy engines on our own RM channels (docs/nv-backend.md).
    // Without /dev/nvidiactl, with the proprietary module or another driver
    // branch, the error names the cause and the fix.
    nv::Options o;
    o.process_slot = options.process_slot;
    // CONCCL_NV_INTERRUPT_WAITS=0: waits nap (up to wait_max_sleep_us) instead
    // of sleeping on the engine's interrupt, for telling a lost interrupt
    // (each costs the ppoll's safety timeout, 2 ms) from a slow engine.
    if (const char* env = std::getenv("CONCCL_NV_INTERRUPT_WAITS")) {
      const std::string v = env;
      if (v != "0" && v != "1")
        return error(Code::invalid_argument,
                     "CONCCL_NV_INTERRUPT_WAITS is '" + v + "': set it to 0 (nap) or 1 (sleep on interrupts), or unset it");
      o.interrupt_waits = v == "1";
    }
    Result<std::unique_ptr<Device>> d = nv::open_generic(o);
    if (!d.ok()) return d.status().prefix("open_device(backend nv)");
    return d;
  }
  return error(Code::invalid_argument, "unknown backend '" + options.backend + "' (emu, kfd, nv)");
}

}  // namespace conccl
