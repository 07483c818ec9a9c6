// src/backends/emu/presets.cpp - emulated topologies, with the facts behind them.
#include "backends/emu/presets.hpp"

#include "conccl/emu.hpp"

namespace conccl::emu {

namespace {

// MI300X (gfx942, SDMA 4.4.2) in SPX mode: 16 SDMA engines per GPU, 2 for
// host (PCIe) traffic and 14 for xGMI (AMD DMA-Latte refuses fewer:
// shared/reference/paper.md §2, dmalatte_mori.md §1.8); 8 GPUs fully
// connected by xGMI, one link to each peer.
// Recommended engine per (source, destination) OAM: the kernel's table
// rec_sdma_eng_map in linux drivers/gpu/drm/amd/amdkfd/kfd_topology.c
// (kfd_set_recommended_sdma_engines, patch "drm/amdkfd: allow users to target
// recommended SDMA engines", 2024), exposed as recommended_sdma_engine_id_mask
// on each io_link. Engine ids count the PCIe engines first (2 = first xGMI).
constexpr int kMi300xRecEngine[8][8] = {
    {-1, 14, 12, 2, 4, 8, 10, 6}, {14, -1, 2, 10, 8, 4, 6, 12}, {10, 2, -1, 12, 14, 6, 4, 8},
    {2, 12, 10, -1, 6, 14, 8, 4}, {4, 8, 14, 6, -1, 10, 12, 2}, {8, 4, 6, 14, 12, -1, 2, 10},
    {10, 6, 4, 8, 12, 2, -1, 14}, {6, 12, 8, 4, 2, 10, 14, -1}};
// KFD io_link weight for xGMI links between MI300X GPUs (kfd_crat.c:
// KFD_CRAT_XGMI_WEIGHT = 15).
constexpr uint32_t kXgmiWeight = 15;

constexpr uint64_t kDefaultMemory = 4ull << 30;  // emulated HBM per GPU (sparse memfd: costs only what is touched)

}  // namespace

std::vector<std::pair<std::string, std::string>> presets() {
  return {
      {"mi300x", "8x MI300X (gfx942, SDMA 4.4.2): 16 engines each (0-1 PCIe, 2-15 xGMI), fully connected, "
                 "kernel's recommended engine per peer"},
      {"small", "2 GPUs (gfx942, SDMA 4.4.2) with 4 engines each (0-1 PCIe, 2-3 xGMI); "
                "--gpus N --engines K reshape it"},
  };
}

Result<Topology> build_topology(const DeviceOptions& o) {
  std::string preset = o.preset.empty() ? (o.gpus || o.engines ? "small" : "mi300x") : o.preset;
  int gpus = 0, engines = 0;
  if (preset == "mi300x") {
    gpus = 8;
    engines = 16;
  } else if (preset == "small") {
    gpus = 2;
    engines = 4;
  } else {
    std::string names;
    for (const auto& [n, d] : presets()) names += (names.empty() ? "" : ", ") + n;
    return error(Code::invalid_argument, "unknown emulator preset '" + preset + "' (presets: " + names + ")");
  }
  const bool custom = (o.gpus && o.gpus != gpus) || (o.engines && o.engines != engines);
  if (o.gpus) gpus = o.gpus;
  if (o.engines) engines = o.engines;
  if (gpus < 1 || gpus > 64)
    return error(Code::invalid_argument, "--gpus must be 1..64, not " + std::to_string(gpus));
  if (engines < 1 || engines > 32)
    return error(Code::invalid_argument, "--engines must be 1..32, not " + std::to_string(engines));
  sdma::Gen gen = sdma::Gen::v4_4_2;
  std::string name = "gfx942";
  if (!o.gen.empty()) {
    std::optional<sdma::Gen> g = sdma::parse_gen(o.gen);
    if (!g) return error(Code::invalid_argument, "unknown SDMA generation '" + o.gen + "' (" + sdma::gen_list() + ")");
    gen = *g;
    name = "sdma" + std::string(sdma::gen_name(gen));
  }

  Topology t;
  t.backend = "emu";
  t.preset = custom ? preset + "(custom)" : preset;
  // Two host engines like MI300X when there are at least three; else all PCIe.
  const int pcie = engines >= 3 ? 2 : engines;
  const int xgmi = engines - pcie;
  for (int g = 0; g < gpus; ++g) {
    GpuInfo gi;
    gi.index = g;
    gi.name = name;
    gi.gen = gen;
    gi.memory_bytes = o.memory_per_gpu ? o.memory_per_gpu : kDefaultMemory;
    for (int e = 0; e < engines; ++e) gi.engines.push_back({e, e < pcie ? EngineKind::pcie : EngineKind::xgmi});
    for (int p = 0; p < gpus; ++p) {
      if (p == g) continue;
      LinkInfo l;
      l.peer = p;
      l.type = xgmi ? "xgmi" : "pcie";
      l.weight = xgmi ? kXgmiWeight : 20;
      if (preset == "mi300x" && !custom) {
        l.recommended_engines = {kMi300xRecEngine[g][p]};
      } else if (xgmi) {
        // Spread peers over the xGMI engines: peer at distance d gets engine
        // pcie + (d-1) % xgmi, so each peer has its own engine when there are enough.
        const int d = (p - g + gpus) % gpus;
        l.recommended_engines = {pcie + (d - 1) % xgmi};
      } else {
        l.recommended_engines = {(p + g) % engines};
      }
      gi.links.push_back(std::move(l));
    }
    t.gpus.push_back(std::move(gi));
  }
  return t;
}

}  // namespace conccl::emu
