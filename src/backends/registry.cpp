// src/backends/registry.cpp - open_device: the backend by name, from one table.
#include "backends/registry.hpp"

namespace conccl {

namespace {
// The backends, in the order messages list them (docs/backends.md says what each is).
struct BackendRow {
  const char* name;  // DeviceOptions::backend
  BackendOpener open;
};
constexpr BackendRow kBackends[] = {
    {"emu", open_emu_backend},  // the emulated node (docs/emulator.md)
    {"kfd", open_kfd_backend},  // AMD SDMA engines through /dev/kfd (docs/hardware.md)
    {"nv", open_nv_backend},    // NVIDIA Hopper copy engines (docs/nv-backend.md)
};
}  // namespace

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

Status no_cuda_memory(const char* backend) {
  return error(Code::unavailable, std::string("MemKind::cuda is memory CUDA allocates: it needs the nv backend, and this "
                                              "is the ") + backend +
                                      " backend; use MemKind::device (Device::alloc_for_compute gives the memory "
                                      "this backend's compute uses)");
}

}  // namespace conccl
