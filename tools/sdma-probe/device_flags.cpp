// tools/sdma-probe/device_flags.cpp
#include "device_flags.hpp"

namespace probe {

std::vector<FlagSpec> device_flag_specs() {
  return {
      {.name = "gpus", .value = "N", .help = "emu: number of GPUs (reshapes the preset)"},
      {.name = "engines", .value = "K", .help = "emu: SDMA engines per GPU (reshapes the preset)"},
      {.name = "sdma-gen", .value = "GEN", .help = "emu: SDMA generation of the emulated GPUs (default 4.4.2)"},
  };
}

conccl::Result<std::unique_ptr<conccl::Device>> open_device_from_args(const Args& args) {
  conccl::DeviceOptions o;
  o.backend = std::string(backend_name(args.common().backend));
  o.preset = args.common().preset;
  conccl::Result<uint64_t> gpus = args.get_uint("gpus", 0);
  if (!gpus.ok()) return gpus.status();
  conccl::Result<uint64_t> engines = args.get_uint("engines", 0);
  if (!engines.ok()) return engines.status();
  if (*gpus > 64 || *engines > 32)
    return conccl::error(conccl::Code::invalid_argument, "--gpus must be 1..64 and --engines 1..32");
  o.gpus = static_cast<int>(*gpus);
  o.engines = static_cast<int>(*engines);
  o.gen = args.value("sdma-gen").value_or("");
  return conccl::open_device(o);
}

}  // namespace probe
