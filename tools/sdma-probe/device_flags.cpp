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
      {.name = "settings",
       .value = "\"K=V ...\"",
       .help = "the backend's own settings (docs/backends.md), e.g. \"pin_engines=on\" (kfd), "
               "\"interrupt_waits=0\" (nv), \"memory_per_gpu=1G\" (emu)"},
  };
}

conccl::Result<std::unique_ptr<conccl::Device>> open_device_from_args(const Args& args, int process_slot) {
  conccl::DeviceOptions o;
  o.process_slot = process_slot;
  o.backend = std::string(backend_name(args.common().backend));
  conccl::Result<int64_t> gpus = args.get_int_in_range("gpus", 1, kMaxGpus, 0);
  if (!gpus.ok()) return gpus.status();
  conccl::Result<int64_t> engines = args.get_int_in_range("engines", 1, kMaxEngines, 0);
  if (!engines.ok()) return engines.status();
  if (args.has("gen") && args.has("sdma-gen"))
    return conccl::error(conccl::Code::invalid_argument, "--gen and --sdma-gen are the same flag: give one");
  const std::string gen = args.value("gen").value_or(args.value("sdma-gen").value_or(""));
  // The emulator's shape goes in its settings (docs/emulator.md); the other
  // backends have no preset and read "gpus"/"engines" settings of their own,
  // so these flags say nothing to them.
  if (o.backend == "emu") {
    auto add = [&](const char* key, const std::string& value) {
      if (!value.empty()) o.settings += (o.settings.empty() ? "" : " ") + std::string(key) + "=" + value;
    };
    add("preset", args.common().preset);
    add("gpus", *gpus ? std::to_string(*gpus) : "");  // 0: the preset's
    add("engines", *engines ? std::to_string(*engines) : "");
    add("gen", gen);
  }
  const std::string extra = args.value("settings").value_or("");
  if (!extra.empty()) o.settings += (o.settings.empty() ? "" : " ") + extra;
  conccl::Result<std::unique_ptr<conccl::Device>> dev = conccl::open_device(o);
  if (dev.ok()) return dev;
  // The library names the option by its setting ("the emulator setting
  // engines"): say which flag set it.
  conccl::Status st = dev.status();
  const std::string gen_flag = args.has("sdma-gen") ? "--sdma-gen" : "--gen";
  for (const auto& [setting, flag, given] :
       {std::tuple{"setting gpus ", std::string("--gpus"), args.has("gpus")},
        std::tuple{"setting engines ", std::string("--engines"), args.has("engines")},
        std::tuple{"setting gen ", gen_flag, !gen.empty()}})
    if (given && st.message().find(setting) != std::string::npos) return st.prefix(flag);
  if (!extra.empty() && st.message().find("setting") != std::string::npos) return st.prefix("--settings");
  return st;
}

}  // namespace probe
