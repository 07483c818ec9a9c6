// src/backends/emu/open_emu.cpp - the emulator's row in the backend registry:
// its settings (preset, gpus, engines, gen, memory_per_gpu; docs/emulator.md)
// over DeviceOptions' fields of the same names.
#include "backends/registry.hpp"
#include "backends/settings.hpp"
#include "conccl/emu.hpp"

namespace conccl {

namespace {
// A setting may stand in for its DeviceOptions field (`unset` when not
// given), not contradict it. `read(&v)` takes the setting into v.
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

Result<std::unique_ptr<Device>> open_emu_backend(const DeviceOptions& options) {
  Result<Settings> s = Settings::parse(options.settings, "emu");
  if (!s.ok()) return s.status();
  DeviceOptions o = options;
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
  CONCCL_RETURN_IF_ERROR(s->finish());
  Result<std::unique_ptr<emu::EmuDevice>> d = emu::create(o);
  if (!d.ok()) return d.status();
  return std::unique_ptr<Device>(std::move(d).value());
}

}  // namespace conccl
