// src/backends/kfd/open_kfd.cpp - the KFD backend's row in the registry: its
// settings into kfd::Options (include/conccl/kfd.hpp says what each does).
//   trap=auto|on|off        KFD events for wake-ups and fault reports
//   require_engine_ids=0|1  refuse to open unless queues can be pinned
//   pin_engines=auto|on|off which GPUs' queues are pinned (auto: as ROCr)
//   sysfs_root=, device_path=, dri_dir=   where the topology and nodes are
#include "backends/registry.hpp"
#include "backends/settings.hpp"
#include "conccl/kfd.hpp"

namespace conccl {

Result<std::unique_ptr<Device>> open_kfd_backend(const DeviceOptions& options) {
  Result<Settings> s = Settings::parse(options.settings, "kfd");
  if (!s.ok()) return s.status();
  kfd::Options o;
  o.process_slot = options.process_slot;
  int trap = static_cast<int>(o.trap_wakeups);
  CONCCL_RETURN_IF_ERROR(s->take_choice("trap", {"auto", "on", "off"}, &trap));
  o.trap_wakeups = static_cast<kfd::Options::Trap>(trap);
  CONCCL_RETURN_IF_ERROR(s->take("require_engine_ids", &o.require_engine_ids));
  int pin = static_cast<int>(o.pin_engines);
  CONCCL_RETURN_IF_ERROR(s->take_choice("pin_engines", {"auto", "on", "off"}, &pin));
  o.pin_engines = static_cast<kfd::Options::Pin>(pin);
  CONCCL_RETURN_IF_ERROR(s->take("sysfs_root", &o.sysfs_root));
  CONCCL_RETURN_IF_ERROR(s->take("device_path", &o.device_path));
  CONCCL_RETURN_IF_ERROR(s->take("dri_dir", &o.dri_dir));
  CONCCL_RETURN_IF_ERROR(s->finish());
  // Errors say why the backend cannot run here and what to do.
  Result<std::unique_ptr<kfd::KfdDevice>> d = kfd::open(o);
  if (!d.ok()) return d.status();
  return std::unique_ptr<Device>(std::move(d).value());
}

}  // namespace conccl
