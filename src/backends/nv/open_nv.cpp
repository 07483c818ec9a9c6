// src/backends/nv/open_nv.cpp - the NVIDIA backend's row in the registry: its
// settings into nv::Options (include/conccl/nv.hpp says what each does).
//   gpus=0,1        driver GPUs in order (an index may repeat)
//   engines=2,4     LCEs to open channels on
//   interrupt_waits=0|1, wait_spin_us=, wait_max_sleep_us=
//   gpfifo_entries=, pushbuffer_bytes=, va_size=, pce_bytes_per_s=
// CONCCL_NV_INTERRUPT_WAITS=0/1 sets interrupt_waits where settings do not.
#include <cstdlib>

#include "backends/registry.hpp"
#include "backends/settings.hpp"
#include "conccl/nv.hpp"

namespace conccl {

Result<std::unique_ptr<Device>> open_nv_backend(const DeviceOptions& options) {
  Result<Settings> s = Settings::parse(options.settings, "nv");
  if (!s.ok()) return s.status();
  nv::Options o;
  o.process_slot = options.process_slot;
  // CONCCL_NV_INTERRUPT_WAITS=0: waits nap (up to wait_max_sleep_us) instead
  // of sleeping on the engine's interrupt, for telling a lost interrupt
  // (each costs the ppoll's safety timeout) from a slow engine.
  if (const char* env = std::getenv("CONCCL_NV_INTERRUPT_WAITS")) {
    const std::string v = env;
    if (v != "0" && v != "1")
      return error(Code::invalid_argument,
                   "CONCCL_NV_INTERRUPT_WAITS is '" + v + "': set it to 0 (nap) or 1 (sleep on interrupts), or unset it");
    o.interrupt_waits = v == "1";
  }
  CONCCL_RETURN_IF_ERROR(s->take("gpus", &o.gpus));
  CONCCL_RETURN_IF_ERROR(s->take("engines", &o.engines));
  CONCCL_RETURN_IF_ERROR(s->take("interrupt_waits", &o.interrupt_waits));
  CONCCL_RETURN_IF_ERROR(s->take("wait_spin_us", &o.wait_spin_us));
  CONCCL_RETURN_IF_ERROR(s->take("wait_max_sleep_us", &o.wait_max_sleep_us));
  CONCCL_RETURN_IF_ERROR(s->take("gpfifo_entries", &o.gpfifo_entries));
  CONCCL_RETURN_IF_ERROR(s->take("pushbuffer_bytes", &o.pushbuffer_bytes));
  CONCCL_RETURN_IF_ERROR(s->take("va_size", &o.va_size));
  uint64_t pce_rate = static_cast<uint64_t>(o.pce_bytes_per_s);
  CONCCL_RETURN_IF_ERROR(s->take("pce_bytes_per_s", &pce_rate));
  o.pce_bytes_per_s = static_cast<double>(pce_rate);
  CONCCL_RETURN_IF_ERROR(s->finish());
  // Without /dev/nvidiactl, with the proprietary module or another driver
  // branch, the error names the cause and the fix.
  Result<std::unique_ptr<Device>> d = nv::open_generic(o);
  if (!d.ok()) return d.status().prefix("open_device(backend nv)");
  return d;
}

}  // namespace conccl
