// tests/backends/kfd/kfd_topology_test.cpp - KFD sysfs parsing and the Topology
// built from it, on fixture trees laid out as the kernel lays them out
// (fixtures/make_kfd_fixtures.py) and on small trees written per test.
#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <set>

#include "backends/kfd/kfd_policy.hpp"

namespace {

namespace fs = std::filesystem;
using conccl::Code;
using conccl::EngineKind;
using conccl::kfd::KfdTopology;
using conccl::kfd::SysTopology;

std::string fixture(const std::string& name) { return std::string(KFD_FIXTURES) + "/" + name + "/topology"; }

KfdTopology load(const std::string& name,
                 const conccl::kfd::RenderAccess& access = conccl::kfd::all_render_nodes_accessible()) {
  conccl::Result<SysTopology> sys = conccl::kfd::read_sysfs(fixture(name));
  EXPECT_TRUE(sys.ok()) << sys.status().to_string();
  if (!sys.ok()) return {};
  conccl::Result<KfdTopology> t = conccl::kfd::build_topology(*sys, access);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? *t : KfdTopology{};
}

bool has_note(const conccl::Topology& t, const std::string& needle) {
  for (const std::string& n : t.notes)
    if (n.find(needle) != std::string::npos) return true;
  return false;
}

// The kernel's table (kfd_topology.c rec_sdma_eng_map), written out again
// here on purpose: the fixture generator and this test must agree with it
// independently.
constexpr int kRec[8][8] = {{-1, 14, 12, 2, 4, 8, 10, 6}, {14, -1, 2, 10, 8, 4, 6, 12}, {10, 2, -1, 12, 14, 6, 4, 8},
                            {2, 12, 10, -1, 6, 14, 8, 4}, {4, 8, 14, 6, -1, 10, 12, 2}, {8, 4, 6, 14, 12, -1, 2, 10},
                            {10, 6, 4, 8, 12, 2, -1, 14}, {6, 12, 8, 4, 2, 10, 14, -1}};

TEST(KfdSysfs, ReadsEveryNodeAndLinkOfMi300x) {
  conccl::Result<SysTopology> sys = conccl::kfd::read_sysfs(fixture("mi300x_spx"));
  ASSERT_TRUE(sys.ok()) << sys.status().to_string();
  ASSERT_EQ(sys->nodes.size(), 9u);
  EXPECT_TRUE(sys->warnings.empty());
  const conccl::kfd::SysNode& cpu = sys->nodes[0];
  EXPECT_EQ(cpu.gpu_id, 0u);
  EXPECT_FALSE(cpu.is_gpu());
  EXPECT_EQ(cpu.io_links.size(), 8u);
  const conccl::kfd::SysNode& g0 = sys->nodes[1];
  EXPECT_TRUE(g0.is_gpu());
  EXPECT_EQ(g0.gpu_id, 53458u);
  EXPECT_EQ(g0.name, "ip discovery");
  EXPECT_EQ(g0.prop("gfx_target_version"), 90402u);
  EXPECT_EQ(g0.prop("hive_id"), 10631624818852212319ull);  // full 64-bit values
  EXPECT_EQ(g0.vram_bytes, 206141652992ull);
  ASSERT_EQ(g0.io_links.size(), 8u);
  EXPECT_EQ(g0.io_links[0].type, 2u);
  EXPECT_EQ(g0.io_links[0].node_to, 0u);
  EXPECT_EQ(g0.io_links[1].type, 11u);
  EXPECT_EQ(g0.io_links[1].weight, 15u);
  ASSERT_TRUE(g0.io_links[1].rec_sdma_eng_id_mask.has_value());
  EXPECT_EQ(*g0.io_links[1].rec_sdma_eng_id_mask, 1u << 14);
  EXPECT_TRUE(g0.p2p_links.empty());
}

TEST(KfdTopology, Mi300xSpx) {
  const KfdTopology kt = load("mi300x_spx");
  const conccl::Topology& t = kt.topology;
  EXPECT_EQ(t.backend, "kfd");
  EXPECT_EQ(kt.cpu_nodes, 1);
  ASSERT_EQ(t.gpus.size(), 8u);
  ASSERT_EQ(kt.gpus.size(), 8u);
  for (int g = 0; g < 8; ++g) {
    const conccl::GpuInfo& gi = t.gpus[g];
    const conccl::kfd::GpuNode& gn = kt.gpus[g];
    EXPECT_EQ(gi.index, g);
    EXPECT_EQ(gi.name, "gfx942");
    EXPECT_EQ(gi.isa, conccl::Isa::sdma_gen(conccl::sdma::Gen::v4_4_2));
    EXPECT_EQ(gi.memory_bytes, 206141652992ull);
    EXPECT_EQ(gn.sysfs_node, g + 1);
    EXPECT_EQ(gn.thunk_node, g + 1);  // CPU node 0 comes first in the thunk's numbering too
    EXPECT_EQ(gn.num_sdma, 2);
    EXPECT_EQ(gn.num_xgmi, 14);
    EXPECT_EQ(gn.queues_per_engine, 8);
    EXPECT_EQ(gn.drm_render_minor, 128 + 8 * g);
    ASSERT_EQ(gi.engines.size(), 16u);
    for (int e = 0; e < 16; ++e) {
      EXPECT_EQ(gi.engines[e].id, e);
      EXPECT_EQ(gi.engines[e].kind, e < 2 ? EngineKind::pcie : EngineKind::xgmi) << "engine " << e;
    }
    // Fully connected by xGMI: 7 peers, no link to the CPU listed.
    ASSERT_EQ(gi.links.size(), 7u);
    std::set<int> peers;
    for (const conccl::LinkInfo& l : gi.links) {
      peers.insert(l.peer);
      EXPECT_NE(l.peer, g);
      EXPECT_EQ(l.type, "xgmi");
      EXPECT_EQ(l.weight, 15u);
      // The kernel's single-bit recommendation, exactly.
      ASSERT_EQ(l.recommended_engines.size(), 1u) << g << "->" << l.peer;
      EXPECT_EQ(l.recommended_engines[0], kRec[g][l.peer]) << g << "->" << l.peer;
    }
    EXPECT_EQ(peers.size(), 7u);
  }
  EXPECT_FALSE(has_note(t, "no recommended_sdma_engine_id_mask"));
  // The only note: what each by-engine-id queue costs, once for the 8 GPUs.
  ASSERT_EQ(t.notes.size(), 1u) << t.notes.back();
  EXPECT_EQ(t.notes[0].rfind("gpu 0,1,2,3,4,5,6,7: each by-engine-id queue costs 177.4 MiB (8 XCCs x 22.2 MiB)", 0),
            0u) << t.notes[0];
  EXPECT_TRUE(has_note(t, "38 CUs and 1520 waves per XCC, amdkfd kfd_queue.c's formula")) << t.notes[0];
}

// The per-queue CWSR area, by the formula in kfd_policy.hpp, worked by hand
// from the fixtures' node properties:
//  MI300X (gfx942): 38 CUs/XCC, 1520 waves; wg = 38 * (512K+16K+64K+4K) = 23191552,
//    ctl = align4K(40 + 1520*8 + 8) = 12288, debug = 1520*32 = 48640;
//    (23191552 + 12288 + 48640) * 8 XCCs = 186019840 (177.4 MiB, the reported figure).
//  MI250X GCD (gfx90a): 110 CUs, min(4400, 8/1*512) = 4096 waves; wg = 110 * 610304 = 67133440,
//    ctl = align4K(40 + 4096*8 + 8) = 36864, debug = 131072 -> 67301376.
//  RX 7900 XTX (gfx1100): 96 CUs, 3072 waves; wg = 96 * (384K+16K+64K+4K) = 46006272,
//    ctl = align4K(40 + 3072*12 + 8) = 40960, debug = 98304 -> 46145536.
TEST(KfdTopology, CwsrAreaPerQueueFromSysfs) {
  struct Case {
    const char* fixture;
    uint64_t bytes, per_xcc;
    uint32_t xccs;
  };
  for (const Case& c : {Case{"mi300x_spx", 186019840, 23252480, 8}, Case{"mi250x", 67301376, 67301376, 1},
                        Case{"rx7900xtx", 46145536, 46145536, 1}}) {
    const KfdTopology kt = load(c.fixture);
    ASSERT_FALSE(kt.gpus.empty()) << c.fixture;
    for (size_t i = 0; i < kt.gpus.size(); ++i) {
      EXPECT_EQ(kt.gpus[i].cwsr.bytes, c.bytes) << c.fixture;
      EXPECT_EQ(kt.gpus[i].cwsr.per_xcc_bytes, c.per_xcc) << c.fixture;
      EXPECT_EQ(kt.gpus[i].cwsr.xccs, c.xccs) << c.fixture;
      EXPECT_EQ(kt.topology.gpus[i].per_queue_bytes, c.bytes) << c.fixture;
    }
  }

  conccl::Result<SysTopology> sys = conccl::kfd::read_sysfs(fixture("mi300x_spx"));
  ASSERT_TRUE(sys.ok());
  conccl::kfd::SysNode node = sys->nodes[1];
  // A kernel that publishes cwsr_size (kfd_topology.c node_show): its figure is used.
  node.props["cwsr_size"] = 23203840 + 4096;
  conccl::kfd::CwsrEstimate e = conccl::kfd::queue_cwsr_estimate(node);
  EXPECT_EQ(e.bytes, (23203840u + 4096 + 48640) * 8);
  EXPECT_NE(e.source.find("cwsr_size"), std::string::npos) << e.source;
  // Without the CU counts: MI300X falls back to the reported figure, labelled as such.
  node.props.erase("cwsr_size");
  node.props.erase("simd_per_cu");
  e = conccl::kfd::queue_cwsr_estimate(node);
  EXPECT_EQ(e.bytes, 177ull << 20);
  EXPECT_NE(e.source.find("the figure reported for MI300X, not computed"), std::string::npos) << e.source;
  // Another GPU without them: not known (0), never a guess.
  node.props["gfx_target_version"] = 90010;
  EXPECT_EQ(conccl::kfd::queue_cwsr_estimate(node).bytes, 0u);
}

TEST(KfdTopology, Mi250xWithoutRecommendedMasks) {
  const KfdTopology kt = load("mi250x");
  const conccl::Topology& t = kt.topology;
  ASSERT_EQ(t.gpus.size(), 4u);
  for (const conccl::GpuInfo& gi : t.gpus) {
    EXPECT_EQ(gi.name, "gfx90a");
    EXPECT_EQ(gi.isa, conccl::Isa::sdma_gen(conccl::sdma::Gen::v4_4));
    EXPECT_EQ(gi.caps().max_copy_bytes, 0x3FFFFF00u);  // SDMA 4.4.0: 30-bit COPY count
    ASSERT_EQ(gi.engines.size(), 5u);
    EXPECT_EQ(gi.engines[1].kind, EngineKind::pcie);
    EXPECT_EQ(gi.engines[2].kind, EngineKind::xgmi);
    EXPECT_EQ(gi.memory_bytes, 68702699520ull);
    EXPECT_EQ(gi.links.size(), 2u);
    for (const conccl::LinkInfo& l : gi.links) {
      EXPECT_EQ(l.type, "xgmi");
      // No mask from the kernel: every xGMI engine, as the kernel computes
      // outside its MI300 table.
      EXPECT_EQ(l.recommended_engines, (std::vector<int>{2, 3, 4}));
    }
  }
  // GCD 0 <-> 1 and 0 <-> 2 are linked; 0 <-> 3 is not.
  EXPECT_NE(t.gpus[0].link_to(1), nullptr);
  EXPECT_NE(t.gpus[0].link_to(2), nullptr);
  EXPECT_EQ(t.gpus[0].link_to(3), nullptr);
  EXPECT_EQ(t.gpus[1].link_to(2), nullptr);
  EXPECT_NE(t.gpus[3].link_to(1), nullptr);
  EXPECT_TRUE(has_note(t, "no recommended_sdma_engine_id_mask"));
}

TEST(KfdTopology, ConsumerGfx11) {
  const KfdTopology kt = load("rx7900xtx");
  const conccl::Topology& t = kt.topology;
  ASSERT_EQ(t.gpus.size(), 1u);
  EXPECT_EQ(t.gpus[0].name, "gfx1100");
  EXPECT_EQ(t.gpus[0].isa, conccl::Isa::sdma_gen(conccl::sdma::Gen::v6));
  ASSERT_EQ(t.gpus[0].engines.size(), 2u);
  EXPECT_EQ(t.gpus[0].engines[0].kind, EngineKind::pcie);
  EXPECT_EQ(t.gpus[0].engines[1].kind, EngineKind::pcie);
  EXPECT_TRUE(t.gpus[0].links.empty());
  EXPECT_EQ(kt.gpus[0].num_xgmi, 0);
  EXPECT_EQ(kt.gpus[0].queues_per_engine, 6);
  EXPECT_EQ(kt.gpus[0].thunk_node, 1);
  EXPECT_EQ(t.gpus[0].memory_bytes, 25753026560ull);
}

TEST(KfdTopology, TableAndJsonCarryNotes) {
  const KfdTopology kt = load("mi250x");
  const std::string table = conccl::topology_table(kt.topology);
  EXPECT_NE(table.find("gpu 0: gfx90a, SDMA 4.4, 5 engines (2 pcie: 0,1; 3 xgmi: 2,3,4)"), std::string::npos) << table;
  EXPECT_NE(table.find("note: the kernel gives no recommended_sdma_engine_id_mask"), std::string::npos) << table;
  EXPECT_NE(table.find("3 xgmi: 2,3,4), 64.2 MiB per queue\n"), std::string::npos) << table;
  EXPECT_NE(table.find("note: gpu 0,1,2,3: each by-engine-id queue costs 64.2 MiB beside its ring"), std::string::npos)
      << table;
  const std::string json = conccl::topology_json(kt.topology);
  EXPECT_NE(json.find("\"backend\": \"kfd\""), std::string::npos);
  EXPECT_NE(json.find("\"notes\": [\"the kernel gives no"), std::string::npos) << json;
  EXPECT_NE(json.find("\"memory_bytes\": 68702699520, \"per_queue_bytes\": 67301376, \"engines\""), std::string::npos)
      << json;
}

// GPU node skipped because this process cannot open its render node: the
// thunk hides ENOENT/EPERM nodes, so later nodes' thunk ids shift down.
TEST(KfdTopology, HiddenRenderNodesShiftThunkIds) {
  const KfdTopology kt = load("mi300x_spx", [](int minor) { return minor == 136 ? EPERM : 0; });
  const conccl::Topology& t = kt.topology;
  ASSERT_EQ(t.gpus.size(), 7u);
  EXPECT_EQ(kt.gpus[0].sysfs_node, 1);
  EXPECT_EQ(kt.gpus[0].thunk_node, 1);
  EXPECT_EQ(kt.gpus[1].sysfs_node, 3);  // sysfs node 2 (renderD136) is gone
  EXPECT_EQ(kt.gpus[1].thunk_node, 2);
  EXPECT_TRUE(has_note(t, "renderD136) skipped: cannot open its render node"));
  EXPECT_TRUE(has_note(t, "render and video groups"));
  for (const conccl::GpuInfo& gi : t.gpus) {
    EXPECT_EQ(gi.links.size(), 6u);
    for (const conccl::LinkInfo& l : gi.links) EXPECT_LT(l.peer, 7);
  }
  // The recommendation still follows the physical sockets: gpu 1 is socket 2.
  EXPECT_EQ(t.gpus[1].link_to(0)->recommended_engines, std::vector<int>{kRec[2][0]});
}

TEST(KfdTopology, EaccesRenderNodeKeepsThunkNumberingButSkipsGpu) {
  const KfdTopology kt = load("rx7900xtx", [](int) { return 0; });
  EXPECT_EQ(kt.gpus.size(), 1u);
  conccl::Result<SysTopology> sys = conccl::kfd::read_sysfs(fixture("rx7900xtx"));
  ASSERT_TRUE(sys.ok());
  conccl::Result<KfdTopology> none = conccl::kfd::build_topology(*sys, [](int) { return EACCES; });
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::not_found);
  EXPECT_NE(none.status().message().find("Permission denied"), std::string::npos) << none.status().message();
  EXPECT_NE(none.status().message().find("usermod -aG render,video"), std::string::npos);
}

TEST(KfdSysfs, MissingRootIsUnavailable) {
  conccl::Result<SysTopology> sys = conccl::kfd::read_sysfs("/nonexistent/kfd/topology");
  ASSERT_FALSE(sys.ok());
  EXPECT_EQ(sys.status().code(), Code::unavailable);
  EXPECT_NE(sys.status().message().find("/nonexistent/kfd/topology/nodes"), std::string::npos);
  EXPECT_NE(sys.status().message().find("amdgpu"), std::string::npos);
}

// ---------------------------------------------------------------------------
// Small trees written by the test, for cases the fixtures do not cover.

class TempTree {
 public:
  TempTree() {
    root_ = fs::temp_directory_path() / ("conccl_kfd_" + std::to_string(::getpid()) + "_" + std::to_string(seq_++));
    fs::remove_all(root_);
    fs::create_directories(root_ / "nodes");
  }
  ~TempTree() { fs::remove_all(root_); }
  std::string root() const { return root_.string(); }

  void write(const std::string& rel, const std::string& text) {
    const fs::path p = root_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  void cpu(int n) {
    write("nodes/" + std::to_string(n) + "/gpu_id", "0\n");
    write("nodes/" + std::to_string(n) + "/properties", "cpu_cores_count 8\nsimd_count 0\ngfx_target_version 0\n");
  }
  void gpu(int n, uint32_t gtv, int minor, int sdma, int xgmi, const std::string& extra = "") {
    write("nodes/" + std::to_string(n) + "/gpu_id", std::to_string(1000 + n) + "\n");
    write("nodes/" + std::to_string(n) + "/properties",
          "simd_count 120\ngfx_target_version " + std::to_string(gtv) + "\ndrm_render_minor " + std::to_string(minor) +
              "\nnum_sdma_engines " + std::to_string(sdma) + "\nnum_sdma_xgmi_engines " + std::to_string(xgmi) +
              "\nnum_sdma_queues_per_engine 8\nlocal_mem_size 17163091968\n" + extra);
  }
  void link(int n, const char* dir, int idx, int to, int type, int weight, const std::string& extra = "") {
    write("nodes/" + std::to_string(n) + "/" + dir + "/" + std::to_string(idx) + "/properties",
          "type " + std::to_string(type) + "\nnode_from " + std::to_string(n) + "\nnode_to " + std::to_string(to) +
              "\nweight " + std::to_string(weight) + "\n" + extra + "flags 1\n");
  }

 private:
  fs::path root_;
  static inline int seq_ = 0;
};

conccl::Result<KfdTopology> build(const TempTree& tree) {
  conccl::Result<SysTopology> sys = conccl::kfd::read_sysfs(tree.root());
  if (!sys.ok()) return sys.status();
  return conccl::kfd::build_topology(*sys, conccl::kfd::all_render_nodes_accessible());
}

TEST(KfdTopology, PcieP2pLinksAreListedAndDeduplicated) {
  TempTree t;
  t.cpu(0);
  t.gpu(1, 90008, 128, 8, 0);  // gfx908 (MI100): 8 PCIe engines
  t.gpu(2, 90008, 129, 8, 0);
  t.link(1, "io_links", 0, 0, 2, 20);
  t.link(2, "io_links", 0, 0, 2, 20);
  // PCIe peer-to-peer through the root complex (p2p_links), and an indirect
  // link to a CPU node, which is not a GPU link.
  t.link(1, "p2p_links", 0, 2, 2, 40, "recommended_sdma_engine_id_mask 255\n");
  t.link(1, "p2p_links", 1, 0, 2, 40);
  t.link(2, "p2p_links", 0, 1, 2, 40);
  conccl::Result<KfdTopology> kt = build(t);
  ASSERT_TRUE(kt.ok()) << kt.status().to_string();
  const conccl::Topology& topo = kt->topology;
  ASSERT_EQ(topo.gpus.size(), 2u);
  EXPECT_EQ(topo.gpus[0].name, "gfx908");
  EXPECT_EQ(topo.gpus[0].isa, conccl::Isa::sdma_gen(conccl::sdma::Gen::v4));
  EXPECT_EQ(topo.gpus[0].memory_bytes, 17163091968ull);  // local_mem_size when there are no mem_banks
  ASSERT_EQ(topo.gpus[0].links.size(), 1u);
  EXPECT_EQ(topo.gpus[0].links[0].type, "pcie");
  EXPECT_EQ(topo.gpus[0].links[0].weight, 40u);
  EXPECT_EQ(topo.gpus[0].links[0].recommended_engines, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  // gpu 1's p2p link has no mask: PCIe peers get every PCIe engine.
  ASSERT_EQ(topo.gpus[1].links.size(), 1u);
  EXPECT_EQ(topo.gpus[1].links[0].recommended_engines.size(), 8u);
}

TEST(KfdTopology, LowerWeightWinsAndNoP2pDmaIsDropped) {
  TempTree t;
  t.cpu(0);
  t.gpu(1, 90402, 128, 2, 14);
  t.gpu(2, 90402, 136, 2, 14);
  t.gpu(3, 90402, 144, 2, 14);
  t.link(1, "p2p_links", 0, 2, 2, 40);
  t.link(1, "io_links", 0, 2, 11, 15, "recommended_sdma_engine_id_mask 12\n");  // engines 2 and 3
  t.write("nodes/1/io_links/1/properties", "type 2\nnode_from 1\nnode_to 3\nweight 20\nflags 17\n");  // NoPeerToPeerDMA
  conccl::Result<KfdTopology> kt = build(t);
  ASSERT_TRUE(kt.ok()) << kt.status().to_string();
  const conccl::GpuInfo& g0 = kt->topology.gpus[0];
  ASSERT_EQ(g0.links.size(), 1u);
  EXPECT_EQ(g0.links[0].peer, 1);
  EXPECT_EQ(g0.links[0].type, "xgmi");
  EXPECT_EQ(g0.links[0].weight, 15u);
  EXPECT_EQ(g0.links[0].recommended_engines, (std::vector<int>{2, 3}));
  EXPECT_TRUE(has_note(kt->topology, "gpu 0 -> gpu 2: io_links/1 says no peer-to-peer DMA"));
}

TEST(KfdTopology, MaskBitsBeyondTheEnginesAreDropped) {
  TempTree t;
  t.cpu(0);
  t.gpu(1, 110000, 128, 2, 0);
  t.gpu(2, 110000, 129, 2, 0);
  t.link(1, "p2p_links", 0, 2, 2, 40, "recommended_sdma_engine_id_mask 6\n");  // engines 1 and 2; 2 does not exist
  t.link(2, "p2p_links", 0, 1, 2, 40, "recommended_sdma_engine_id_mask 0\n");  // 0 = none given
  conccl::Result<KfdTopology> kt = build(t);
  ASSERT_TRUE(kt.ok()) << kt.status().to_string();
  EXPECT_EQ(kt->topology.gpus[0].links[0].recommended_engines, std::vector<int>{1});
  EXPECT_TRUE(has_note(kt->topology, "names engines this GPU does not have"));
  EXPECT_EQ(kt->topology.gpus[1].links[0].recommended_engines, (std::vector<int>{0, 1}));
}

TEST(KfdTopology, UnsupportedTargetsAreSkippedWithANote) {
  TempTree t;
  t.cpu(0);
  t.gpu(1, 80003, 128, 2, 0);    // gfx803 (Fiji/Polaris): SDMA 3, not supported
  t.gpu(2, 120500, 129, 2, 0);   // gfx1250: no packet generation known yet
  t.gpu(3, 120001, 130, 2, 0);   // gfx1201: SDMA 7
  t.gpu(4, 90400, 131, 0, 0);    // no SDMA engines
  conccl::Result<KfdTopology> kt = build(t);
  ASSERT_TRUE(kt.ok()) << kt.status().to_string();
  ASSERT_EQ(kt->gpus.size(), 1u);
  EXPECT_EQ(kt->topology.gpus[0].name, "gfx1201");
  EXPECT_EQ(kt->topology.gpus[0].isa, conccl::Isa::sdma_gen(conccl::sdma::Gen::v7));
  EXPECT_EQ(kt->gpus[0].thunk_node, 3);
  EXPECT_TRUE(has_note(kt->topology, "KFD node 1 (gfx803, renderD128) skipped: no SDMA packet generation"));
  EXPECT_TRUE(has_note(kt->topology, "KFD node 2 (gfx1250, renderD129) skipped"));
  EXPECT_TRUE(has_note(kt->topology, "KFD node 4 (gfx940, renderD131) skipped: reports 0 PCIe + 0 xGMI"));
}

TEST(KfdSysfs, MalformedFilesBecomeWarnings) {
  TempTree t;
  t.cpu(0);
  t.gpu(1, 90402, 128, 2, 14, "this line is garbage\nnum_cp_queues -3\n");
  t.write("nodes/2/gpu_id", "not-a-number\n");
  t.write("nodes/2/properties", "simd_count 4\n");
  t.write("nodes/1/io_links/0/properties", "weight 15\n");  // no type / node_to
  t.write("nodes/notanode/gpu_id", "7\n");                   // ignored: not a node number
  conccl::Result<SysTopology> sys = conccl::kfd::read_sysfs(t.root());
  ASSERT_TRUE(sys.ok()) << sys.status().to_string();
  EXPECT_EQ(sys->nodes.size(), 2u);
  EXPECT_EQ(sys->warnings.size(), 4u);
  conccl::Result<KfdTopology> kt = conccl::kfd::build_topology(*sys, conccl::kfd::all_render_nodes_accessible());
  ASSERT_TRUE(kt.ok());
  EXPECT_EQ(kt->gpus.size(), 1u);
  EXPECT_TRUE(has_note(kt->topology, "sysfs: "));
  EXPECT_TRUE(has_note(kt->topology, "this line is garbage"));
}

TEST(KfdTopology, NoGpuIsNotFound) {
  TempTree t;
  t.cpu(0);
  conccl::Result<KfdTopology> kt = build(t);
  ASSERT_FALSE(kt.ok());
  EXPECT_EQ(kt.status().code(), Code::not_found);
  EXPECT_NE(kt.status().message().find("no usable AMD GPU"), std::string::npos);
}

TEST(KfdTopology, DefaultRenderAccessReportsErrno) {
  const conccl::kfd::RenderAccess access = conccl::kfd::default_render_access("/nonexistent/dri");
  EXPECT_EQ(access(128), ENOENT);
}

// gfx_target_version -> SDMA generation, through the packets layer's table.
TEST(KfdTopology, GfxTargetVersionToGeneration) {
  struct Case {
    uint32_t v;
    const char* gfx;
    std::optional<conccl::sdma::Gen> gen;
  };
  const Case cases[] = {
      {90000, "gfx900", conccl::sdma::Gen::v4},     {90006, "gfx906", conccl::sdma::Gen::v4},
      {90008, "gfx908", conccl::sdma::Gen::v4},     {90010, "gfx90a", conccl::sdma::Gen::v4_4},
      {90402, "gfx942", conccl::sdma::Gen::v4_4_2}, {90500, "gfx950", conccl::sdma::Gen::v4_4_2},
      {100100, "gfx1010", conccl::sdma::Gen::v5},   {100300, "gfx1030", conccl::sdma::Gen::v5_2},
      {110000, "gfx1100", conccl::sdma::Gen::v6},   {110501, "gfx1151", conccl::sdma::Gen::v6},
      {120001, "gfx1201", conccl::sdma::Gen::v7},   {80003, "gfx803", std::nullopt},
      {120500, "gfx1250", std::nullopt},
  };
  for (const Case& c : cases) {
    std::optional<conccl::sdma::GfxTarget> t = conccl::sdma::gfx_target_version_to_target(c.v);
    ASSERT_EQ(t.has_value(), c.gen.has_value()) << c.v;
    if (t) {
      EXPECT_EQ(t->gfx, c.gfx);
      EXPECT_EQ(t->gen, *c.gen) << c.gfx;
    }
  }
}

}  // namespace
