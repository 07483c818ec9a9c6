// tools/sdma-probe/device_flags.cpp
#include "device_flags.hpp"

namespace probe {

std::vector<FlagSpec> device_flag_specs() {
  return {
      {.name = "gpus", .value = "N", .help = "emu: number of GPUs, 1..64 (reshapes the preset)"},
      {.name = "engines", .value = "K", .help = "emu: SDMA engines per GPU, 1..32 (reshapes the preset)"},
      // --gen, as asm/dis/demo spell the generation; --sdma-gen is its old name.
      {.name = "gen", .value = "GEN", .help = "emu: SDMA generation of the emulated GPUs (default: the preset's)"},
      {.name = "sdma-gen", .value = "GEN", .help = "the old name of --gen"},
  };
}

conccl::Result<std::unique_ptr<conccl::Device>> open_device_from_args(const Args& args, int process_slot) {
  conccl::DeviceOptions o;
  o.process_slot = process_slot;
  o.backend = std::string(backend_name(args.common().backend));
  o.preset = args.common().preset;
  conccl::Result<int64_t> gpus = args.get_int_in_range("gpus", 1, kMaxGpus, 0);
  if (!gpus.ok()) return gpus.status();
  conccl::Result<int64_t> engines = args.get_int_in_range("engines", 1, kMaxEngines, 0);
  if (!engines.ok()) return engines.status();
  o.gpus = static_cast<int>(*gpus);  // 0: the preset's
  o.engines = static_cast<int>(*engines);
  if (args.has("gen") && args.has("sdma-gen"))
    return conccl::error(conccl::Code::invalid_argument, "--gen and --sdma-gen are the same flag: give one");
  o.gen = args.value("gen").value_or(args.value("sdma-gen").value_or(""));
  return conccl::open_device(o);
}

}  // namespace probe
