// src/backends/emu/open_emu.cpp - the emulator's row in the backend registry:
// its settings (preset, gpus, engines, gen, memory_per_gpu, visible;
// docs/emulator.md) into NodeOptions, and emu::create.
#include "backends/emu/presets.hpp"
#include "backends/registry.hpp"
#include "backends/settings.hpp"
#include "conccl/emu.hpp"

namespace conccl::emu {

Result<NodeOptions> node_options(const DeviceOptions& options) {
  Result<Settings> s = Settings::parse(options.settings, "emu");
  if (!s.ok()) return s.status();
  NodeOptions o;
  o.process_slot = options.process_slot;
  CONCCL_RETURN_IF_ERROR(s->take("preset", &o.preset));
  CONCCL_RETURN_IF_ERROR(s->take("gpus", 0, 1 << 16, &o.gpus));
  CONCCL_RETURN_IF_ERROR(s->take("engines", 0, 1 << 16, &o.engines));
  CONCCL_RETURN_IF_ERROR(s->take("gen", &o.gen));
  uint64_t mem = 0;
  CONCCL_RETURN_IF_ERROR(s->take("memory_per_gpu", &mem));
  o.memory_per_gpu = static_cast<size_t>(mem);
  if (s->has("visible")) CONCCL_RETURN_IF_ERROR(s->take("visible", &o.visible));
  int maps = 1;
  CONCCL_RETURN_IF_ERROR(s->take("host_maps_gpu_memory", 0, 1, &maps));
  o.host_maps_gpu_memory = maps != 0;
  CONCCL_RETURN_IF_ERROR(s->finish());
  return o;
}

Result<std::unique_ptr<EmuDevice>> create(const DeviceOptions& options) {
  Result<NodeOptions> o = node_options(options);
  if (!o.ok()) return o.status();
  return create_node(*o);
}

}  // namespace conccl::emu

namespace conccl {

Result<std::unique_ptr<Device>> open_emu_backend(const DeviceOptions& options) {
  Result<std::unique_ptr<emu::EmuDevice>> d = emu::create(options);
  if (!d.ok()) return d.status();
  return std::unique_ptr<Device>(std::move(d).value());
}

}  // namespace conccl
