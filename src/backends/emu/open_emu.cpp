// src/backends/emu/open_emu.cpp - the emulator's row in the backend registry:
// its settings (preset, gpus, engines, gen, memory_per_gpu; docs/emulator.md)
// over DeviceOptions' fields of the same names.
#include "backends/registry.hpp"
#include "backends/settings.hpp"
#include "conccl/emu.hpp"

namespace conccl {

namespace {
// A setting may stand in for its DeviceOptions field, not contradict it.
template <typename T>
Status merge(Settings& s, const char* key, T* field, T unset) {
  T v = *field;
  const bool given = s.has(key);
  CONCCL_RETURN_IF_ERROR(s.take(key, &v));
  if (!given) return Status();
  if (*field != unset && *field != v)
    return error(Code::invalid_argument, std::string("backend emu: ") + key +
                                             " is given twice, as a DeviceOptions field and in settings, with "
                                             "different values: give it once");
  *field = v;
  return Status();
}

Status merge_int(Settings& s, const char* key, int* field) {
  int v = *field;
  const bool given = s.has(key);
  CONCCL_RETURN_IF_ERROR(s.take(key, 0, 1 << 16, &v));
  if (!given) return Status();
  if (*field != 0 && *field != v)
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
  CONCCL_RETURN_IF_ERROR(merge<std::string>(*s, "preset", &o.preset, ""));
  CONCCL_RETURN_IF_ERROR(merge_int(*s, "gpus", &o.gpus));
  CONCCL_RETURN_IF_ERROR(merge_int(*s, "engines", &o.engines));
  CONCCL_RETURN_IF_ERROR(merge<std::string>(*s, "gen", &o.gen, ""));
  uint64_t mem = o.memory_per_gpu;
  CONCCL_RETURN_IF_ERROR(merge<uint64_t>(*s, "memory_per_gpu", &mem, 0));
  o.memory_per_gpu = static_cast<size_t>(mem);
  CONCCL_RETURN_IF_ERROR(s->finish());
  Result<std::unique_ptr<emu::EmuDevice>> d = emu::create(o);
  if (!d.ok()) return d.status();
  return std::unique_ptr<Device>(std::move(d).value());
}

}  // namespace conccl
