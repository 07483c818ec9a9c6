// src/backends/kfd/sysfs.cpp - KFD's topology from sysfs, and the ConCCL
// Topology built from it. Pure file parsing: compiled and tested everywhere.
//
// Layout and keys: linux drivers/gpu/drm/amd/amdkfd/kfd_topology.c
// (node_show, mem_bank_show, iolink_show; p2p_links since Linux 5.19;
// recommended_sdma_engine_id_mask since KFD 1.17, Linux ~6.12). The thunk
// reads the same files (ROCR-Runtime libhsakmt/src/topology.c), and AMD
// DMA-Latte's scripts/gen_sdma_map_sysfs.py reads node and io_link properties
// the same way (GPU = simd_count > 0, xGMI = type 11).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "packets/generation.hpp"
#include "backends/kfd/kfd_policy.hpp"

namespace conccl::kfd {

namespace fs = std::filesystem;

namespace {

// Reads a small sysfs file; nullopt if it cannot be opened.
std::optional<std::string> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  if (s.empty()) return std::nullopt;
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// "key value" lines; lines that do not parse become warnings.
std::map<std::string, uint64_t> parse_properties(const std::string& text, const std::string& where,
                                                 std::vector<std::string>& warnings) {
  std::map<std::string, uint64_t> out;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    std::optional<uint64_t> v;
    if (sp != std::string::npos && sp > 0) v = parse_u64(std::string_view(line).substr(sp + 1));
    if (!v) {
      warnings.push_back(where + " line " + std::to_string(lineno) + ": cannot parse '" + line +
                         "' (expected 'key <decimal>'); ignored");
      continue;
    }
    out[line.substr(0, sp)] = *v;
  }
  return out;
}

// Numeric subdirectories of dir, sorted.
std::vector<int> numbered_entries(const fs::path& dir) {
  std::vector<int> ids;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return ids;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::optional<uint64_t> id = parse_u64(name);
    if (id && *id < 1u << 20) ids.push_back(static_cast<int>(*id));
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

uint32_t u32(const std::map<std::string, uint64_t>& m, const char* key, uint32_t fallback = 0) {
  auto it = m.find(key);
  return it == m.end() ? fallback : static_cast<uint32_t>(it->second);
}

void read_links(const fs::path& node_dir, const char* dir, int node_id, std::vector<SysLink>& out,
                std::vector<std::string>& warnings) {
  for (int idx : numbered_entries(node_dir / dir)) {
    const fs::path file = node_dir / dir / std::to_string(idx) / "properties";
    std::optional<std::string> text = read_file(file);
    if (!text) {
      warnings.push_back(file.string() + ": unreadable; link ignored");
      continue;
    }
    std::map<std::string, uint64_t> p = parse_properties(*text, file.string(), warnings);
    if (!p.count("type") || !p.count("node_to")) {
      warnings.push_back(file.string() + ": no 'type' or 'node_to'; link ignored");
      continue;
    }
    SysLink l;
    l.dir = dir;
    l.index = idx;
    l.type = u32(p, "type");
    l.node_from = u32(p, "node_from", static_cast<uint32_t>(node_id));
    l.node_to = u32(p, "node_to");
    l.weight = u32(p, "weight");
    l.min_bandwidth = u32(p, "min_bandwidth");
    l.max_bandwidth = u32(p, "max_bandwidth");
    l.flags = u32(p, "flags");
    if (p.count("recommended_sdma_engine_id_mask")) l.rec_sdma_eng_id_mask = u32(p, "recommended_sdma_engine_id_mask");
    out.push_back(l);
  }
}

// gfx_target_version (major*10000 + minor*100 + stepping, decimal) -> "gfx942".
std::string gfx_name(uint32_t v) {
  static constexpr char kHex[] = "0123456789abcdef";
  const uint32_t major = v / 10000, minor = (v / 100) % 100, step = v % 100;
  if (minor > 15 || step > 15) return "gfx_target_version " + std::to_string(v);
  return "gfx" + std::to_string(major) + kHex[minor] + kHex[step];
}

std::string errno_text(int err) { return std::string(std::strerror(err)); }

}  // namespace

Result<SysTopology> read_sysfs(const std::string& root) {
  const fs::path nodes_dir = fs::path(root) / "nodes";
  std::error_code ec;
  if (!fs::is_directory(nodes_dir, ec))
    return error(Code::unavailable,
                 "no KFD topology at " + nodes_dir.string() +
                     ": the amdgpu driver's KFD is not loaded here (no AMD GPU, or amdgpu without HSA "
                     "support); on an AMD machine load amdgpu (modprobe amdgpu) or install ROCm's "
                     "amdgpu-dkms, and in a container mount /sys read-only as usual");
  SysTopology t;
  t.root = root;
  for (int id : numbered_entries(nodes_dir)) {
    const fs::path dir = nodes_dir / std::to_string(id);
    SysNode n;
    n.id = id;
    std::optional<std::string> gid = read_file(dir / "gpu_id");
    std::optional<uint64_t> gidv = gid ? parse_u64(*gid) : std::nullopt;
    if (!gidv) {
      // libhsakmt skips such nodes too (topology_sysfs_get_gpu_id -> NOT_SUPPORTED).
      t.warnings.push_back((dir / "gpu_id").string() + ": missing or not a number; node " + std::to_string(id) +
                           " ignored");
      continue;
    }
    n.gpu_id = static_cast<uint32_t>(*gidv);
    if (std::optional<std::string> name = read_file(dir / "name")) {
      n.name = *name;
      while (!n.name.empty() && (n.name.back() == '\n' || n.name.back() == ' ')) n.name.pop_back();
    }
    std::optional<std::string> props = read_file(dir / "properties");
    if (!props) {
      t.warnings.push_back((dir / "properties").string() + ": unreadable; node " + std::to_string(id) + " ignored");
      continue;
    }
    n.props = parse_properties(*props, (dir / "properties").string(), t.warnings);
    for (int m : numbered_entries(dir / "mem_banks")) {
      const fs::path f = dir / "mem_banks" / std::to_string(m) / "properties";
      std::optional<std::string> text = read_file(f);
      if (!text) continue;
      std::map<std::string, uint64_t> p = parse_properties(*text, f.string(), t.warnings);
      // heap_type: 0 system, 1 frame buffer public, 2 frame buffer private
      // (kfd_crat.h HSA_MEM_HEAP_TYPE_*).
      const uint64_t heap = p.count("heap_type") ? p["heap_type"] : 0;
      if (heap == 1 || heap == 2) n.vram_bytes += p.count("size_in_bytes") ? p["size_in_bytes"] : 0;
    }
    if (n.vram_bytes == 0 && n.gpu_id != 0) n.vram_bytes = n.prop("local_mem_size");
    read_links(dir, "io_links", id, n.io_links, t.warnings);
    read_links(dir, "p2p_links", id, n.p2p_links, t.warnings);
    t.nodes.push_back(std::move(n));
  }
  if (t.nodes.empty())
    return error(Code::unavailable, "KFD topology at " + nodes_dir.string() +
                                        " lists no readable node; check that /sys is mounted and readable");
  return t;
}

RenderAccess default_render_access(const std::string& dri_dir) {
  return [dri_dir](int minor) -> int {
    const std::string path = dri_dir + "/renderD" + std::to_string(minor);
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return errno;
    ::close(fd);
    return 0;
  };
}

namespace {

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// amdkfd kfd_queue.c kfd_get_vgpr_size_per_cu (gfx_target_version numbering).
uint64_t vgpr_bytes_per_cu(uint64_t gfxv) {
  if (gfxv == 90008 || gfxv == 90010 || gfxv / 100 == 904 || gfxv == 90500) return 0x80000;
  if (gfxv == 110000 || gfxv == 110001 || gfxv == 120000 || gfxv == 120001) return 0x60000;
  return 0x40000;
}

}  // namespace

CwsrEstimate queue_cwsr_estimate(const SysNode& n) {
  CwsrEstimate e;
  const uint64_t gfxv = n.prop("gfx_target_version");
  const uint64_t simds = n.prop("simd_count"), simd_per_cu = n.prop("simd_per_cu");
  const uint64_t arrays = n.prop("array_count"), arrays_per_engine = n.prop("simd_arrays_per_engine");
  const uint64_t xccs = std::max<uint64_t>(n.prop("num_xcc", 1), 1);
  e.xccs = static_cast<uint32_t>(xccs);
  const bool navi = gfxv >= 100100;  // GFX_VERSION_NAVI10
  const uint64_t cu = simd_per_cu ? simds / simd_per_cu / xccs : 0;
  if (cu == 0 || (!navi && (arrays == 0 || arrays_per_engine == 0))) {
    if (gfxv / 100 == 904) {
      e.bytes = kMi300xReportedCwsrBytes;
      e.source = "the figure reported for MI300X, not computed: sysfs lacks simd_count, simd_per_cu or array_count";
    }
    return e;
  }
  const uint64_t waves = navi ? cu * 32 : std::min(cu * 40, arrays / arrays_per_engine * 512);
  uint64_t ctx = 0;
  if (n.prop("cwsr_size") > 0) {
    ctx = n.prop("cwsr_size");
    e.source = "KFD's cwsr_size (sysfs)";
  } else {
    const uint64_t lds = n.has("lds_size_in_kb") ? n.prop("lds_size_in_kb") << 10 : 0x10000;
    const uint64_t wg = align_up(cu * (vgpr_bytes_per_cu(gfxv) + 0x4000 + lds + 0x1000), 4096);
    uint64_t ctl = align_up(40 + waves * (navi ? 12 : 8) + 8, 4096);
    if (gfxv / 10000 == 10) ctl = std::min<uint64_t>(ctl, 0x7000);
    ctx = ctl + wg;
    e.source = "computed from sysfs (" + std::to_string(cu) + " CUs and " + std::to_string(waves) +
               " waves per XCC, amdkfd kfd_queue.c's formula)";
  }
  e.per_xcc_bytes = ctx + align_up(waves * 32, 64);
  e.bytes = align_up(e.per_xcc_bytes * xccs, 4096);
  return e;
}

namespace {

// A GPU node of sysfs as ConCCL uses it, or nullopt with a note saying why
// not (no known SDMA generation, its render node cannot be opened, no
// engines). `render_err`: errno of opening its render node (0: opened).
std::optional<GpuNode> usable_gpu(const SysTopology& sys, const SysNode& n, int render_err, int thunk_id, int index,
                                  std::vector<std::string>& notes) {
  const uint32_t gtv = static_cast<uint32_t>(n.prop("gfx_target_version"));
  const std::string gfx = gfx_name(gtv);
  const std::string who = "KFD node " + std::to_string(n.id) + " (" + gfx + ", renderD" +
                          std::to_string(n.prop("drm_render_minor")) + ")";
  std::optional<sdma::GfxTarget> target = sdma::gfx_target_version_to_target(gtv);
  if (!target) {
    notes.push_back(who + " skipped: no SDMA packet generation is known for " + gfx +
                    " (ConCCL supports gfx9 and newer: `sdma-probe gfx` lists them)");
    return std::nullopt;
  }
  if (render_err != 0) {
    std::string fix = render_err == EACCES || render_err == EPERM
                          ? "add the user to the render and video groups (sudo usermod -aG render,video $USER, "
                            "then log in again); in a container pass --device=/dev/dri"
                          : "check that the amdgpu driver created /dev/dri/renderD" +
                                std::to_string(n.prop("drm_render_minor"));
    notes.push_back(who + " skipped: cannot open its render node: " + errno_text(render_err) + "; " + fix);
    return std::nullopt;
  }
  const int num_sdma = static_cast<int>(n.prop("num_sdma_engines"));
  const int num_xgmi = static_cast<int>(n.prop("num_sdma_xgmi_engines"));
  if (num_sdma + num_xgmi <= 0 || num_sdma + num_xgmi > 32) {
    notes.push_back(who + " skipped: reports " + std::to_string(num_sdma) + " PCIe + " + std::to_string(num_xgmi) +
                    " xGMI SDMA engines (num_sdma_engines/num_sdma_xgmi_engines)");
    return std::nullopt;
  }
  GpuNode g;
  g.index = index;
  g.sysfs_node = n.id;
  g.thunk_node = thunk_id;
  g.gpu_id = n.gpu_id;
  g.gfx_target_version = gtv;
  g.gfx = gfx;
  g.gen = target->gen;
  g.num_sdma = num_sdma;
  g.num_xgmi = num_xgmi;
  g.queues_per_engine = static_cast<int>(n.prop("num_sdma_queues_per_engine"));
  g.drm_render_minor = static_cast<int>(n.prop("drm_render_minor"));
  g.hive_id = n.prop("hive_id");
  g.location_id = n.prop("location_id");
  g.domain = n.prop("domain");
  g.min_submit_bytes = target->min_submit_bytes;
  g.cwsr = queue_cwsr_estimate(n);
  for (const SysLink& l : n.io_links) {
    const SysNode* to = sys.node(l.node_to);
    if (!to || to->gpu_id != 0 || g.cpu_link_known) continue;
    g.cpu_link_known = true;
    g.cpu_link_type = l.type;
    g.cpu_link_flags = l.flags;
  }
  return g;
}

// The generic description of a usable GPU (its engines: PCIe ones first).
GpuInfo gpu_info(const GpuNode& g, const SysNode& n) {
  GpuInfo gi;
  gi.index = g.index;
  gi.node_gpu_id = n.gpu_id;  // KFD's gpu_id: the same in every process of the node
  gi.name = g.gfx;
  gi.isa = Isa::sdma_gen(g.gen);
  gi.memory_bytes = n.vram_bytes;
  gi.per_queue_bytes = g.cwsr.bytes;
  for (int e = 0; e < g.num_sdma + g.num_xgmi; ++e)
    gi.engines.push_back(EngineInfo{e, e < g.num_sdma ? EngineKind::pcie : EngineKind::xgmi});
  return gi;
}

// GPU-to-GPU links: the best (lowest weight) io_link or p2p_link per peer,
// with the engines the kernel recommends toward it.
void add_links(const SysTopology& sys, KfdTopology& kt, std::vector<std::string>& notes) {
  Topology& t = kt.topology;
  bool fallback_masks = false;
  for (GpuNode& g : kt.gpus) {
    const SysNode* n = sys.node(static_cast<uint32_t>(g.sysfs_node));
    GpuInfo& gi = t.gpus[static_cast<size_t>(g.index)];
    struct Candidate {
      const SysLink* link;
      int peer;
    };
    std::vector<Candidate> best;  // one per peer
    for (const std::vector<SysLink>* list : {&n->io_links, &n->p2p_links}) {
      for (const SysLink& l : *list) {
        const GpuNode* peer = kt.by_sysfs(static_cast<int>(l.node_to));
        if (!peer || peer->index == g.index) continue;  // CPU node, skipped GPU, or self
        if (l.flags & kLinkFlagNoPeerToPeerDma) {
          notes.push_back("gpu " + std::to_string(g.index) + " -> gpu " + std::to_string(peer->index) + ": " + l.dir +
                          "/" + std::to_string(l.index) + " says no peer-to-peer DMA (flags " +
                          std::to_string(l.flags) + "); not listed as a link");
          continue;
        }
        auto it = std::find_if(best.begin(), best.end(), [&](const Candidate& c) { return c.peer == peer->index; });
        if (it == best.end())
          best.push_back({&l, peer->index});
        else if (l.weight < it->link->weight)
          it->link = &l;  // io_links come first, so ties keep the direct link
      }
    }
    std::sort(best.begin(), best.end(), [](const Candidate& a, const Candidate& b) { return a.peer < b.peer; });
    for (const Candidate& c : best) {
      const SysLink& l = *c.link;
      LinkInfo li;
      li.peer = c.peer;
      li.type = l.type == kLinkTypeXgmi ? "xgmi" : l.type == kLinkTypePcie ? "pcie" : "type" + std::to_string(l.type);
      li.weight = l.weight;
      uint32_t mask = l.rec_sdma_eng_id_mask.value_or(0);
      const uint32_t all = g.engine_count() >= 32 ? ~0u : (1u << g.engine_count()) - 1;
      if (mask & ~all) {
        notes.push_back("gpu " + std::to_string(g.index) + " -> gpu " + std::to_string(c.peer) +
                        ": recommended_sdma_engine_id_mask " + std::to_string(mask) +
                        " names engines this GPU does not have; those bits are ignored");
        mask &= all;
      }
      if (mask == 0) {
        // What the kernel computes outside its 8-GPU table
        // (kfd_topology.c kfd_set_recommended_sdma_engines).
        fallback_masks = true;
        const bool xgmi = l.type == kLinkTypeXgmi && g.num_xgmi > 0;
        const int first = xgmi ? g.num_sdma : 0;
        const int count = xgmi ? g.num_xgmi : (g.num_sdma > 0 ? g.num_sdma : g.num_xgmi);
        for (int e = first; e < first + count; ++e) mask |= 1u << e;
      }
      for (int e = 0; e < 32; ++e)
        if (mask & (1u << e)) li.recommended_engines.push_back(e);
      gi.links.push_back(std::move(li));
    }
  }
  if (fallback_masks)
    notes.push_back(
        "the kernel gives no recommended_sdma_engine_id_mask for some links (KFD < 1.17, before Linux 6.12): their "
        "recommended engines are every xGMI engine for xGMI peers and every PCIe engine otherwise, as the kernel "
        "computes outside its 8-GPU MI300 table");
}

// What a GPU's link to the CPU lacks, and what each queue costs beside its
// ring (one note per distinct cost: 8 identical MI300X GPUs, one line).
void add_cost_notes(const KfdTopology& kt, std::vector<std::string>& notes) {
  for (const GpuNode& g : kt.gpus)
    if (!g.host_atomics64())
      notes.push_back("gpu " + std::to_string(g.index) +
                      ": its link to the CPU has no 64-bit PCIe AtomicOps (io_link flags " +
                      std::to_string(g.cpu_link_flags) +
                      ", NO_ATOMICS_64): its queues refuse SDMA ATOMICs (signal_add); "
                      "enable AtomicOps on the PCIe path (BIOS, switches) or use single-writer signals");
  for (size_t i = 0; i < kt.gpus.size(); ++i) {
    const CwsrEstimate& c = kt.gpus[i].cwsr;
    bool seen = false;
    for (size_t j = 0; j < i; ++j) seen |= kt.gpus[j].cwsr.bytes == c.bytes && kt.gpus[j].cwsr.source == c.source;
    if (seen || c.bytes == 0) continue;
    std::string who;
    for (size_t j = i; j < kt.gpus.size(); ++j)
      if (kt.gpus[j].cwsr.bytes == c.bytes && kt.gpus[j].cwsr.source == c.source)
        who += (who.empty() ? "" : ",") + std::to_string(j);
    std::string what = mib(c.bytes);
    if (c.per_xcc_bytes && c.xccs > 1) what += " (" + std::to_string(c.xccs) + " XCCs x " + mib(c.per_xcc_bytes) + ")";
    notes.push_back("gpu " + who + ": each by-engine-id queue costs " + what +
                    " beside its ring: the CWSR area libhsakmt allocates with it (VRAM where KFD has the SVM API, "
                    "else GTT) and KFD does not use for SDMA queues; kernel-chooses queues get none; " + c.source);
  }
}

}  // namespace

Result<KfdTopology> build_topology(const SysTopology& sys, const RenderAccess& access) {
  KfdTopology kt;
  Topology& t = kt.topology;
  t.backend = "kfd";
  std::vector<std::string> notes;

  // Pass 1: thunk node ids (sysfs order, minus hidden device nodes) and GPUs.
  int thunk_id = 0;
  for (const SysNode& n : sys.nodes) {
    int render_err = 0;
    if (n.gpu_id != 0) {
      const int minor = static_cast<int>(n.prop("drm_render_minor"));
      render_err = minor > 0 ? access(minor) : ENOENT;
    }
    // libhsakmt hides device nodes whose render node is absent (ENOENT) or
    // forbidden by a device cgroup (EPERM); other errors fail its snapshot.
    const bool thunk_visible = n.gpu_id == 0 || (render_err != ENOENT && render_err != EPERM);
    const int this_thunk_id = thunk_visible ? thunk_id++ : -1;
    if (n.gpu_id == 0) {
      ++kt.cpu_nodes;
      continue;
    }
    if (!n.is_gpu()) continue;
    std::optional<GpuNode> g =
        usable_gpu(sys, n, render_err, this_thunk_id, static_cast<int>(kt.gpus.size()), notes);
    if (!g) continue;
    kt.gpus.push_back(*g);
    t.gpus.push_back(gpu_info(*g, n));
  }
  add_links(sys, kt, notes);  // pass 2
  add_cost_notes(kt, notes);
  for (const std::string& w : sys.warnings) notes.push_back("sysfs: " + w);
  t.notes = std::move(notes);
  if (kt.gpus.empty()) {
    std::string why = "no usable AMD GPU in the KFD topology at " + sys.root;
    for (const std::string& n : t.notes) why += "; " + n;
    return error(Code::not_found, why);
  }
  return kt;
}

}  // namespace conccl::kfd
