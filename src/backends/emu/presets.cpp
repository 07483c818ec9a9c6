// src/backends/emu/presets.cpp - emulated topologies, with the facts behind them.
#include "packets/generation.hpp"
#include "backends/emu/presets.hpp"

#include "conccl/emu.hpp"

namespace conccl::emu {

namespace {

// MI300X (gfx942, SDMA 4.4.2) in SPX mode: 16 SDMA engines per GPU, 2 for
// host (PCIe) traffic and 14 for xGMI (AMD DMA-Latte refuses fewer:
// the ConCCL paper §2, AMDResearch/AMD-DMA-Latte scripts/gen_sdma_map_sysfs.py); 8 GPUs fully
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

constexpr uint64_t kDefaultMemory = 4ull << 30;

// H200 (GH100) copy engines as RM reported them on the device machine
// (docs/perf/h200.md, "Engines found"): LCE0 and LCE1 are graphics CEs
// (GRCEs, 2 PCEs each, refused: they belong to graphics channels), LCE2 and
// LCE3 are asynchronous with 2 PCEs each (sharing them with LCE0/1), LCE4 is
// asynchronous with 12 PCEs. Weight = PCE count, as the nv backend reports it.
struct CeRow {
  int lce;
  int pces;
  bool grce;
};
constexpr CeRow kH200Ces[] = {{0, 2, true}, {1, 2, true}, {2, 2, false}, {3, 2, false}, {4, 12, false}};  // emulated HBM per GPU (sparse memfd: costs only what is touched)

}  // namespace

std::vector<std::pair<std::string, std::string>> presets() {
  return {
      {"mi300x", "8x MI300X (gfx942, SDMA 4.4.2): 16 engines each (0-1 PCIe, 2-15 xGMI), fully connected, "
                 "kernel's recommended engine per peer"},
      {"small", "2 GPUs (gfx942, SDMA 4.4.2) with 4 engines each (0-1 PCIe, 2-3 xGMI); "
                "the gpus and engines settings reshape it"},
      {"h200", "1x NVIDIA H200 (Hopper CE methods on GPFIFO channels): async copy engines LCE2, LCE3 "
               "(2 PCEs each) and LCE4 (12 PCEs); the GRCEs LCE0/1 are refused; the setting gpus=N gives N GPUs "
               "linked by NVLink"},
  };
}

namespace {

// How messages name a setting: by its key, where it is given (the library is
// used from C++, C and Python; sdma-probe adds the flag that set it).
std::string setting(const char* key, const char* example) {
  return std::string("the emulator setting ") + key + " (DeviceOptions::settings \"" + example +
         "\"; conccl_device_options.settings in C)";
}

Result<Topology> h200_topology(const NodeOptions& o) {
  if (o.engines)
    return error(Code::invalid_argument, "the h200 preset has the H200's copy engines (LCE2, LCE3, LCE4); " +
                                             setting("engines", "engines=K") + " does not apply to it: leave it out");
  if (!o.gen.empty())
    return error(Code::invalid_argument, "the h200 preset's engines execute Hopper CE methods; an SDMA generation, " +
                                             setting("gen", "gen=GEN") + ", does not apply to it: leave it out");
  const int gpus = o.gpus ? o.gpus : 1;
  if (gpus < 1 || gpus > 64)
    return error(Code::invalid_argument, setting("gpus", "gpus=N") + " must be 1..64, not " + std::to_string(gpus));
  Topology t;
  t.backend = "emu";
  t.preset = gpus == 1 ? "h200" : "h200(custom)";
  for (int g = 0; g < gpus; ++g) {
    GpuInfo gi;
    gi.index = g;
    gi.node_gpu_id = static_cast<uint64_t>(g) + 1;
    gi.name = "NVIDIA H200 (emulated)";
    gi.isa = Isa::hopper();
    gi.memory_bytes = o.memory_per_gpu ? o.memory_per_gpu : kDefaultMemory;
    for (const CeRow& ce : kH200Ces)
      if (!ce.grce) gi.engines.push_back({ce.lce, EngineKind::copy, static_cast<double>(ce.pces)});
    for (int p = 0; p < gpus; ++p)
      if (p != g) gi.links.push_back({p, "nvlink", 1, {}});
    t.gpus.push_back(std::move(gi));
  }
  t.notes.push_back("LCE0, LCE1 (2 PCEs each): graphics copy engines, refused (no channel on a GRCE)");
  return t;
}

}  // namespace

bool is_grce(const Topology& t, int lce) {
  if (t.gpus.empty() || !(t.gpus[0].isa == Isa::hopper())) return false;
  for (const CeRow& ce : kH200Ces)
    if (ce.lce == lce) return ce.grce;
  return false;
}

namespace {

// Every GPU of the node the preset and settings describe.
Result<Topology> whole_node(const NodeOptions& o) {
  std::string preset = o.preset.empty() ? (o.gpus || o.engines ? "small" : "mi300x") : o.preset;
  if (preset == "h200") return h200_topology(o);
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
    return error(Code::invalid_argument, setting("gpus", "gpus=N") + " must be 1..64, not " + std::to_string(gpus));
  if (engines < 1 || engines > 32)
    return error(Code::invalid_argument,
                 setting("engines", "engines=K") + " must be 1..32, not " + std::to_string(engines));
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
    gi.node_gpu_id = static_cast<uint64_t>(g) + 1;
    gi.name = name;
    gi.isa = Isa::sdma_gen(gen);
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

// What a process limited to `visible` sees of the node (NodeOptions::visible).
Result<Topology> hide_gpus(Topology all, const std::vector<int>& visible) {
  const int n = static_cast<int>(all.gpus.size());
  std::vector<int> index_of(static_cast<size_t>(n), -1);  // node index -> index seen here
  Topology t = all;
  t.gpus.clear();
  for (int v : visible) {
    if (v < 0 || v >= n)
      return error(Code::invalid_argument, setting("visible", "visible=0,2") + " names GPU " + std::to_string(v) +
                                               " of a node of GPUs 0.." + std::to_string(n - 1));
    if (index_of[static_cast<size_t>(v)] >= 0)
      return error(Code::invalid_argument, setting("visible", "visible=0,2") + " names GPU " + std::to_string(v) +
                                               " twice");
    index_of[static_cast<size_t>(v)] = static_cast<int>(t.gpus.size());
    t.gpus.push_back(all.gpus[static_cast<size_t>(v)]);
  }
  for (GpuInfo& g : t.gpus) {
    g.index = index_of[static_cast<size_t>(g.node_gpu_id - 1)];
    std::vector<LinkInfo> kept;
    for (LinkInfo l : g.links)
      if (index_of[static_cast<size_t>(l.peer)] >= 0) {
        l.peer = index_of[static_cast<size_t>(l.peer)];
        kept.push_back(std::move(l));
      }
    g.links = std::move(kept);
  }
  std::string shown;
  for (int v : visible) shown += (shown.empty() ? "" : ",") + std::to_string(v);
  t.notes.push_back("this process sees GPUs " + shown + " of the node's " + std::to_string(n) +
                    " (visible=" + shown + "), as its indices 0.." + std::to_string(t.gpus.size() - 1));
  return t;
}

}  // namespace

Result<Topology> build_topology(const NodeOptions& o) {
  Result<Topology> all = whole_node(o);
  if (!all.ok() || o.visible.empty()) return all;
  return hide_gpus(std::move(all).value(), o.visible);
}

}  // namespace conccl::emu
