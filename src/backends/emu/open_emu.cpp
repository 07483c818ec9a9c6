// src/backends/emu/open_emu.cpp - the emulator's row in the backend registry:
// its settings (preset, gpus, engines, gen, memory_per_gpu; docs/emulator.md)
// into NodeOptions, and emu::create. DeviceOptions' fields of the same names
// are deprecated (#30) but still honoured: this file is the one place that
// reads them (and writes them for the C API).
#include "backends/emu/presets.hpp"
#include "backends/registry.hpp"
#include "backends/settings.hpp"
#include "conccl/emu.hpp"

namespace conccl::emu {

// DeviceOptions::preset, gpus, engines, gen and memory_per_gpu are
// [[deprecated]] so that callers move to settings; the emulator keeps them
// working for callers that have not, and the C API forwards its own fields of
// those names. Reading and writing them here is the purpose, not a slip, so
// the warning is silenced for these two functions alone.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
namespace {
NodeOptions deprecated_fields(const DeviceOptions& o) {
  NodeOptions n;
  n.preset = o.preset;
  n.gpus = o.gpus;
  n.engines = o.engines;
  n.gen = o.gen;
  n.memory_per_gpu = o.memory_per_gpu;
  return n;
}
}  // namespace

void set_deprecated_fields(DeviceOptions* o, const NodeOptions& n) {
  o->preset = n.preset;
  o->gpus = n.gpus;
  o->engines = n.engines;
  o->gen = n.gen;
  o->memory_per_gpu = n.memory_per_gpu;
}
#pragma GCC diagnostic pop

namespace {
// A setting may stand in for its deprecated DeviceOptions field (`unset`
// when not given), not contradict it. `read(&v)` takes the setting into v.
template <typename T, typename Read>
Status merge(Settings& s, const char* key, T* field, T unset, Read&& read) {
  if (!s.has(key)) return read(field);  // records the key as known
  T v = *field;
  CONCCL_RETURN_IF_ERROR(read(&v));
  if (*field != unset && *field != v)
    return error(Code::invalid_argument, std::string("backend emu: ") + key +
                                             " is given twice, as a DeviceOptions field and in settings, with "
                                             "different values: give it once");
  *field = v;
  return Status();
}
}  // namespace

Result<NodeOptions> node_options(const DeviceOptions& options) {
  Result<Settings> s = Settings::parse(options.settings, "emu");
  if (!s.ok()) return s.status();
  NodeOptions o = deprecated_fields(options);
  o.process_slot = options.process_slot;
  auto text = [&](const char* key) { return [&s, key](std::string* v) { return s->take(key, v); }; };
  auto count = [&](const char* key) { return [&s, key](int* v) { return s->take(key, 0, 1 << 16, v); }; };
  CONCCL_RETURN_IF_ERROR(merge<std::string>(*s, "preset", &o.preset, "", text("preset")));
  CONCCL_RETURN_IF_ERROR(merge<int>(*s, "gpus", &o.gpus, 0, count("gpus")));
  CONCCL_RETURN_IF_ERROR(merge<int>(*s, "engines", &o.engines, 0, count("engines")));
  CONCCL_RETURN_IF_ERROR(merge<std::string>(*s, "gen", &o.gen, "", text("gen")));
  uint64_t mem = o.memory_per_gpu;
  CONCCL_RETURN_IF_ERROR(
      merge<uint64_t>(*s, "memory_per_gpu", &mem, 0, [&](uint64_t* v) { return s->take("memory_per_gpu", v); }));
  o.memory_per_gpu = static_cast<size_t>(mem);
  if (s->has("visible")) CONCCL_RETURN_IF_ERROR(s->take("visible", &o.visible));
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
