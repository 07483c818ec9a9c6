// src/backends/registry.cpp - open_device: the backend by name, from one table.
#include "backends/registry.hpp"

namespace conccl {

namespace {
constexpr BackendRow kBackends[] = {
    {"emu", "emulated node: the same packets from the same rings, no GPU needed (docs/emulator.md)",
     open_emu_backend},
    {"kfd", "AMD Instinct/Radeon SDMA engines through /dev/kfd and libhsakmt (docs/hardware.md)", open_kfd_backend},
    {"nv", "NVIDIA Hopper copy engines on the open kernel module's RM channels (docs/nv-backend.md)",
     open_nv_backend},
};
}  // namespace

const BackendRow* backend_rows(size_t* count) {
  *count = sizeof(kBackends) / sizeof(kBackends[0]);
  return kBackends;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> out;
  for (const BackendRow& r : kBackends) out.push_back(r.name);
  return out;
}

Result<std::unique_ptr<Device>> open_device(const DeviceOptions& options) {
  const std::string name = options.backend.empty() ? "emu" : options.backend;
  std::string names;
  for (const BackendRow& r : kBackends) {
    if (name == r.name) return r.open(options);
    names += (names.empty() ? "" : ", ") + std::string(r.name);
  }
  return error(Code::invalid_argument, "unknown backend '" + name + "' (" + names + ")");
}

}  // namespace conccl
