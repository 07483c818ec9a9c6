// tools/sdma-probe/device_flags.cpp
#include "device_flags.hpp"

#include <string>
#include <tuple>

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
  conccl::Result<std::unique_ptr<conccl::Device>> dev = conccl::open_device(o);
  if (dev.ok()) return dev;
  // The library names the option by its field (DeviceOptions::engines):
  // say which flag set it.
  conccl::Status st = dev.status();
  const std::string gen_flag = args.has("sdma-gen") ? "--sdma-gen" : "--gen";
  for (const auto& [field, flag, given] :
       {std::tuple{"DeviceOptions::gpus", std::string("--gpus"), args.has("gpus")},
        std::tuple{"DeviceOptions::engines", std::string("--engines"), args.has("engines")},
        std::tuple{"DeviceOptions::gen", gen_flag, !o.gen.empty()}})
    if (given && st.message().find(field) != std::string::npos) return st.prefix(flag);
  return st;
}

}  // namespace probe
