// tests/backends/emu/topology_test.cpp - presets, custom shapes, memory, queue creation.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "conccl/sdma_packets.hpp"
#include "backends/emu/emu_test_util.hpp"

namespace conccl {
namespace {

using namespace conccl::test;

// Linux drivers/gpu/drm/amd/amdkfd/kfd_topology.c, rec_sdma_eng_map (patch
// "drm/amdkfd: allow users to target recommended SDMA engines"), copied here
// independently of src/backends/emu/presets.cpp: [source OAM][destination OAM].
constexpr int kKernelRecSdmaEngMap[8][8] = {
    {-1, 14, 12, 2, 4, 8, 10, 6}, {14, -1, 2, 10, 8, 4, 6, 12}, {10, 2, -1, 12, 14, 6, 4, 8},
    {2, 12, 10, -1, 6, 14, 8, 4}, {4, 8, 14, 6, -1, 10, 12, 2}, {8, 4, 6, 14, 12, -1, 2, 10},
    {10, 6, 4, 8, 12, 2, -1, 14}, {6, 12, 8, 4, 2, 10, 14, -1}};

TEST(EmuTopology, Mi300xPresetMatchesTheKernel) {
  std::unique_ptr<emu::EmuDevice> dev;
  ASSERT_OK_AND_ASSIGN(dev, emu::create(DeviceOptions{}));  // mi300x is the default
  const Topology& t = dev->topology();
  EXPECT_EQ(t.backend, "emu");
  EXPECT_EQ(t.preset, "mi300x");
  ASSERT_EQ(t.gpus.size(), 8u);
  EXPECT_EQ(dev->gpu_count(), 8);
  for (const GpuInfo& g : t.gpus) {
    SCOPED_TRACE("gpu " + std::to_string(g.index));
    EXPECT_EQ(g.isa, Isa::sdma_gen(sdma::Gen::v4_4_2));
    EXPECT_EQ(g.name, "gfx942");
    EXPECT_GT(g.memory_bytes, 0u);
    ASSERT_EQ(g.engines.size(), 16u);
    for (int e = 0; e < 16; ++e) {
      EXPECT_EQ(g.engines[e].id, e);
      EXPECT_EQ(g.engines[e].kind, e < 2 ? EngineKind::pcie : EngineKind::xgmi) << "engine " << e;
    }
    ASSERT_EQ(g.links.size(), 7u);
    std::set<int> peers, engines;
    for (const LinkInfo& l : g.links) {
      EXPECT_NE(l.peer, g.index);
      peers.insert(l.peer);
      EXPECT_EQ(l.type, "xgmi");
      EXPECT_EQ(l.weight, 15u);  // KFD_CRAT_XGMI_WEIGHT
      ASSERT_EQ(l.recommended_engines.size(), 1u) << "peer " << l.peer;
      const int rec = l.recommended_engines[0];
      EXPECT_EQ(rec, kKernelRecSdmaEngMap[g.index][l.peer]) << "peer " << l.peer;
      EXPECT_EQ(g.engines[static_cast<size_t>(rec)].kind, EngineKind::xgmi);
      engines.insert(rec);
      ASSERT_NE(g.link_to(l.peer), nullptr);
      EXPECT_EQ(g.link_to(l.peer)->peer, l.peer);
    }
    EXPECT_EQ(peers.size(), 7u);
    EXPECT_EQ(engines.size(), 7u) << "each peer has an engine of its own";
    EXPECT_EQ(g.link_to(g.index), nullptr);
  }
  const std::string table = topology_table(t), json = topology_json(t);
  EXPECT_TRUE(contains(table, "gpu 7")) << table;
  EXPECT_TRUE(contains(json, "\"emu\"")) << json;
  // Queues can be made on the last engine of the last GPU.
  std::unique_ptr<Queue> q;
  ASSERT_OK_AND_ASSIGN(q, make_queue(*dev, 7, 15, 4096));
  EXPECT_EQ(q->gen(), sdma::Gen::v4_4_2);
}

TEST(EmuTopology, OpenDeviceChoosesTheBackend) {
  std::unique_ptr<Device> dev;
  ASSERT_OK_AND_ASSIGN(dev, open_device(options("small")));
  EXPECT_EQ(dev->gpu_count(), 2);
  EXPECT_NE(as_emu(dev.get()), nullptr);
  for (const char* b : {"kfd", "nv"}) {
    Result<std::unique_ptr<Device>> r = open_device(options("", 0, 0, "", 0, b));
    if (!r.ok()) {
      // Without the driver or hardware the backend says so; it never pretends.
      EXPECT_TRUE(r.status().code() == Code::unavailable || r.status().code() == Code::not_found)
          << b << ": " << r.status().to_string();
      EXPECT_FALSE(r.status().message().empty());
    }
  }
  Result<std::unique_ptr<Device>> bad = open_device(options("", 0, 0, "", 0, "cuda"));
  EXPECT_EQ(bad.status().code(), Code::invalid_argument);
  EXPECT_TRUE(contains(bad.status().message(), "emu")) << bad.status().message();
}

TEST(EmuTopology, SmallAndCustomShapes) {
  std::unique_ptr<emu::EmuDevice> dev;
  ASSERT_OK_AND_ASSIGN(dev, emu::create(options("small")));
  EXPECT_EQ(dev->topology().preset, "small");
  ASSERT_EQ(dev->gpu_count(), 2);
  for (const GpuInfo& g : dev->topology().gpus) {
    ASSERT_EQ(g.engines.size(), 4u);
    EXPECT_EQ(g.engines[1].kind, EngineKind::pcie);
    EXPECT_EQ(g.engines[2].kind, EngineKind::xgmi);
    ASSERT_EQ(g.links.size(), 1u);
    EXPECT_EQ(g.links[0].type, "xgmi");
  }

  // 5 GPUs x 6 engines (2 PCIe + 4 xGMI): every peer gets its own xGMI engine.
  ASSERT_OK_AND_ASSIGN(dev, emu::create(options("", 5, 6)));
  EXPECT_EQ(dev->topology().preset, "small(custom)");
  ASSERT_EQ(dev->gpu_count(), 5);
  for (const GpuInfo& g : dev->topology().gpus) {
    ASSERT_EQ(g.engines.size(), 6u);
    ASSERT_EQ(g.links.size(), 4u);
    std::set<int> used;
    for (const LinkInfo& l : g.links) {
      ASSERT_EQ(l.recommended_engines.size(), 1u);
      const int e = l.recommended_engines[0];
      ASSERT_GE(e, 2);
      ASSERT_LT(e, 6);
      used.insert(e);
    }
    EXPECT_EQ(used.size(), 4u);
  }
  std::unique_ptr<Queue> q;
  ASSERT_OK_AND_ASSIGN(q, make_queue(*dev, 4, 5, 4096));

  // Two engines: both PCIe, links are PCIe, recommendations stay in range.
  ASSERT_OK_AND_ASSIGN(dev, emu::create(options("", 3, 2)));
  for (const GpuInfo& g : dev->topology().gpus) {
    for (const EngineInfo& e : g.engines) EXPECT_EQ(e.kind, EngineKind::pcie);
    for (const LinkInfo& l : g.links) {
      EXPECT_EQ(l.type, "pcie");
      ASSERT_EQ(l.recommended_engines.size(), 1u);
      EXPECT_LT(l.recommended_engines[0], 2);
    }
  }
  // One GPU: no links.
  ASSERT_OK_AND_ASSIGN(dev, emu::create(options("", 1, 1)));
  EXPECT_TRUE(dev->topology().gpus[0].links.empty());

  // mi300x with overrides is a custom shape.
  ASSERT_OK_AND_ASSIGN(dev, emu::create(options("mi300x", 4)));
  EXPECT_EQ(dev->topology().preset, "mi300x(custom)");
  EXPECT_EQ(dev->gpu_count(), 4);
  EXPECT_EQ(dev->topology().gpus[0].engines.size(), 16u);

  // Another generation.
  ASSERT_OK_AND_ASSIGN(dev, emu::create(options("small", 0, 0, "5.2")));
  EXPECT_EQ(dev->topology().gpus[0].isa, Isa::sdma_gen(sdma::Gen::v5_2));
  ASSERT_OK_AND_ASSIGN(q, make_queue(*dev, 0, 0, 4096));
  EXPECT_EQ(q->gen(), sdma::Gen::v5_2);
}

// host_maps_gpu_memory=0: a host with no mapping of GPU memory (as CUDA's
// on the nv backend). Lookups by address find host memory only; the engines
// and the emulated compute (compute_pointer) still reach GPU memory.
TEST(EmuTopology, HostWithoutAMappingOfGpuMemory) {
  DeviceOptions o;
  o.settings = "preset=small host_maps_gpu_memory=0";
  std::unique_ptr<emu::EmuDevice> dev;
  ASSERT_OK_AND_ASSIGN(dev, emu::create(o));
  Buffer gpu, host;
  ASSERT_OK_AND_ASSIGN(gpu, dev->alloc(0, 4096, MemKind::device));
  ASSERT_OK_AND_ASSIGN(host, dev->alloc(-1, 4096, MemKind::host));
  EXPECT_EQ(dev->host_pointer(gpu.va, 8), nullptr) << "GPU memory found by address";
  EXPECT_EQ(dev->host_pointer(host.va, 8), host.host);
  EXPECT_TRUE(dev->is_mapped(gpu.va, 4096)) << "the engines reach it";
  ASSERT_NE(dev->compute_pointer(gpu.va, 8), nullptr);
  EXPECT_EQ(dev->compute_pointer(gpu.va, 8), gpu.host);
  // An engine copies host -> GPU -> host through it.
  std::mt19937_64 rng(77);
  std::vector<uint8_t> data(4096);
  for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
  std::memcpy(host.host, data.data(), data.size());
  Buffer back;
  ASSERT_OK_AND_ASSIGN(back, dev->alloc(-1, 4096, MemKind::host));
  std::unique_ptr<Queue> q;
  ASSERT_OK_AND_ASSIGN(q, dev->create_queue(0, dev->topology().gpus[0].engines[0].id));
  CommandBuffer cb = q->command_buffer();
  ASSERT_OK(cb.copy(gpu.va, host.va, 4096));
  ASSERT_OK(cb.copy(back.va, gpu.va, 4096));
  ASSERT_OK(run(*q, cb));
  EXPECT_EQ(std::memcmp(back.host, data.data(), data.size()), 0);
  // The default maps it, as the emulator always did.
  std::unique_ptr<emu::EmuDevice> plain;
  ASSERT_OK_AND_ASSIGN(plain, emu::create(DeviceOptions{}));
  Buffer g2;
  ASSERT_OK_AND_ASSIGN(g2, plain->alloc(0, 4096, MemKind::device));
  EXPECT_EQ(plain->host_pointer(g2.va, 8), g2.host);
  // Only 0 and 1.
  o.settings = "host_maps_gpu_memory=2";
  Result<std::unique_ptr<emu::EmuDevice>> bad = emu::create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(contains(bad.status().message(), "host_maps_gpu_memory")) << bad.status().message();
}

TEST(EmuTopology, BadOptionsAreRefused) {
  struct Case {
    DeviceOptions o;
    const char* needle;
  };
  const Case cases[] = {
      {options("mi999"), "mi300x"},
      {options("", 65), "setting gpus"},
      {options("", -1), "gpus='-1'"},
      {options("", 0, 33), "setting engines"},
      {options("", 0, -2), "engines='-2'"},
      {options("", 0, 0, "8"), "4.4.2"},
      {options("", 0, 0, "", 4096 + 1), "4 KiB"},
  };
  for (const Case& c : cases) {
    Result<std::unique_ptr<emu::EmuDevice>> r = emu::create(c.o);
    ASSERT_FALSE(r.ok()) << c.needle;
    EXPECT_EQ(r.status().code(), Code::invalid_argument);
    EXPECT_TRUE(contains(r.status().message(), c.needle)) << r.status().message();
  }
  const auto p = emu::presets();
  ASSERT_GE(p.size(), 2u);
  std::set<std::string> names;
  for (const auto& [name, desc] : p) {
    names.insert(name);
    EXPECT_FALSE(desc.empty());
  }
  EXPECT_TRUE(names.count("mi300x"));
  EXPECT_TRUE(names.count("small"));
}

// The `visible` setting: what a process isolated to some GPUs of the node
// sees (issue #31 item 6). Indices from 0, links among the visible GPUs only
// (renumbered, the kernel's recommended engines kept), node_gpu_id the GPU's
// number in the whole node plus one in every view.
TEST(EmuTopology, VisibleGpusAreRenumberedAndKeepTheirNodeIds) {
  std::unique_ptr<emu::EmuDevice> all, some;
  ASSERT_OK_AND_ASSIGN(all, emu::create(DeviceOptions{}));
  DeviceOptions o;
  o.settings = "visible=5,2";
  ASSERT_OK_AND_ASSIGN(some, emu::create(o));
  const Topology& t = some->topology();
  ASSERT_EQ(t.gpus.size(), 2u);
  EXPECT_EQ(some->gpu_count(), 2);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(all->topology().gpus[size_t(i)].node_gpu_id, uint64_t(i) + 1);
  EXPECT_EQ(t.gpus[0].index, 0);
  EXPECT_EQ(t.gpus[0].node_gpu_id, 6u);
  EXPECT_EQ(t.gpus[1].index, 1);
  EXPECT_EQ(t.gpus[1].node_gpu_id, 3u);
  ASSERT_EQ(t.gpus[0].links.size(), 1u);
  EXPECT_EQ(t.gpus[0].links[0].peer, 1);
  EXPECT_EQ(t.gpus[0].links[0].recommended_engines, std::vector<int>{kKernelRecSdmaEngMap[5][2]});
  ASSERT_EQ(t.gpus[1].links.size(), 1u);
  EXPECT_EQ(t.gpus[1].links[0].recommended_engines, std::vector<int>{kKernelRecSdmaEngMap[2][5]});
  EXPECT_TRUE(contains(topology_json(t), "\"node_gpu_id\": 6")) << topology_json(t);
  // Memory works on each visible GPU, in that GPU's own window.
  for (int g = 0; g < 2; ++g) {
    Result<Buffer> b = some->alloc(g, 4096, MemKind::device);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    EXPECT_EQ(b->gpu, g);
    ASSERT_TRUE(some->free(*b).ok());
  }
  for (const char* bad : {"visible=8", "visible=1,1", "visible=-1", "visible=x"}) {
    DeviceOptions b;
    b.settings = bad;
    Result<std::unique_ptr<emu::EmuDevice>> r = emu::create(b);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::invalid_argument) << bad;
    EXPECT_TRUE(contains(r.status().message(), "visible")) << r.status().message();
  }
}

// ---- memory ----------------------------------------------------------------

TEST(EmuMemory, AllocationsAreZeroedReusedAndBounded) {
  constexpr size_t kMem = 8 << 20;
  std::unique_ptr<emu::EmuDevice> dev;
  ASSERT_OK_AND_ASSIGN(dev, make_small(2, 4, kMem));
  EXPECT_EQ(dev->topology().gpus[1].memory_bytes, kMem);
  std::mt19937_64 rng(42);

  for (int gpu : {0, 1}) {
    SCOPED_TRACE("gpu " + std::to_string(gpu));
    Buffer a;
    ASSERT_OK_AND_ASSIGN(a, dev->alloc(gpu, 1 << 20, MemKind::device));
    EXPECT_EQ(a.gpu, gpu);
    EXPECT_EQ(a.kind, MemKind::device);
    EXPECT_EQ(a.size, 1u << 20);
    EXPECT_GE(a.va, emu::kGpuVaBase + gpu * emu::kGpuVaStride);
    EXPECT_LT(a.va + a.size, emu::kGpuVaBase + gpu * emu::kGpuVaStride + kMem + 1);
    EXPECT_EQ(a.va % 4096, 0u);
    ASSERT_NE(a.host, nullptr);
    EXPECT_EQ(dev->host_pointer(a.va, a.size), a.host);
    EXPECT_EQ(dev->host_pointer(a.va + 100, 8), static_cast<uint8_t*>(a.host) + 100);
    const std::vector<uint8_t> zeros(a.size, 0);
    EXPECT_TRUE(bytes_equal(a.host, zeros.data(), a.size));
    fill_random(a.host, a.size, rng);
    const uint64_t va = a.va;
    ASSERT_OK(dev->free(a));
    // The same space comes back, zeroed again (including a partial last page).
    ASSERT_OK_AND_ASSIGN(a, dev->alloc(gpu, (1 << 20) - 100, MemKind::device));
    EXPECT_EQ(a.va, va);
    EXPECT_TRUE(bytes_equal(a.host, zeros.data(), a.size));
    fill_random(a.host, a.size, rng);

    // Out of space: the message says how much is in use.
    Result<Buffer> big = dev->alloc(gpu, kMem, MemKind::device);
    EXPECT_EQ(big.status().code(), Code::resource_exhausted);
    EXPECT_TRUE(contains(big.status().message(), "in use")) << big.status().message();
    // Fill the rest with small pieces, then free them all and take it whole.
    std::vector<Buffer> pieces;
    for (;;) {
      Result<Buffer> b = dev->alloc(gpu, 300 << 10, MemKind::device);
      if (!b.ok()) {
        EXPECT_EQ(b.status().code(), Code::resource_exhausted);
        break;
      }
      fill_random(b->host, b->size, rng);
      pieces.push_back(*b);
      ASSERT_LT(pieces.size(), 100u);
    }
    EXPECT_GE(pieces.size(), 20u);
    ASSERT_OK(dev->free(a));
    for (const Buffer& b : pieces) ASSERT_OK(dev->free(b));
    Buffer whole;
    ASSERT_OK_AND_ASSIGN(whole, dev->alloc(gpu, kMem, MemKind::device));
    const std::vector<uint8_t> zeros_all(kMem, 0);
    EXPECT_TRUE(bytes_equal(whole.host, zeros_all.data(), kMem)) << "freed memory came back dirty";

    // Double free, and a pointer that was never allocated.
    ASSERT_OK(dev->free(whole));
    Status st = dev->free(whole);
    EXPECT_EQ(st.code(), Code::not_found);
    EXPECT_TRUE(contains(st.message(), "double free")) << st.message();
    Buffer bogus = whole;
    bogus.va += 256;
    EXPECT_EQ(dev->free(bogus).code(), Code::not_found);
  }

  // Host memory.
  Buffer h;
  ASSERT_OK_AND_ASSIGN(h, dev->alloc(7 /* ignored */, 1000, MemKind::host));
  EXPECT_EQ(h.gpu, -1);
  EXPECT_EQ(h.kind, MemKind::host);
  EXPECT_GE(h.va, emu::kHostVaBase);
  EXPECT_LT(h.va, emu::kGpuVaBase);
  EXPECT_EQ(dev->host_pointer(h.va, 1000), h.host);
  ASSERT_OK(dev->free(h));
  EXPECT_EQ(dev->free(h).code(), Code::not_found);

  // Bad requests.
  EXPECT_EQ(dev->alloc(2, 4096, MemKind::device).status().code(), Code::invalid_argument);
  EXPECT_EQ(dev->alloc(-1, 4096, MemKind::device).status().code(), Code::invalid_argument);
  EXPECT_EQ(dev->alloc(0, 0, MemKind::device).status().code(), Code::invalid_argument);
  Buffer wrong_gpu;
  wrong_gpu.kind = MemKind::device;
  wrong_gpu.gpu = 9;
  wrong_gpu.va = emu::kGpuVaBase;
  EXPECT_EQ(dev->free(wrong_gpu).code(), Code::invalid_argument);
  // Addresses outside every arena have no CPU view.
  EXPECT_EQ(dev->host_pointer(emu::kGpuVaBase + kMem, 1), nullptr);
  EXPECT_EQ(dev->host_pointer(emu::kGpuVaBase + kMem - 4, 8), nullptr);
  EXPECT_EQ(dev->host_pointer(emu::kGpuVaBase + 2 * emu::kGpuVaStride, 1), nullptr);
  EXPECT_EQ(dev->host_pointer(0x1000, 1), nullptr);
}

TEST(EmuMemory, SmallAllocationsDoNotOverlap) {
  std::unique_ptr<emu::EmuDevice> dev;
  ASSERT_OK_AND_ASSIGN(dev, make_small(1, 1, 1 << 20));
  std::mt19937_64 rng(3);
  std::vector<Buffer> bufs;
  std::vector<std::vector<uint8_t>> want;
  for (int i = 0; i < 200; ++i) {
    Buffer b;
    ASSERT_OK_AND_ASSIGN(b, dev->alloc(0, 1 + rng() % 3000, MemKind::device));
    EXPECT_EQ(b.va % 256, 0u);
    want.push_back(random_bytes(b.size, rng));
    std::memcpy(b.host, want.back().data(), b.size);
    bufs.push_back(b);
  }
  for (size_t i = 0; i < bufs.size(); ++i) ASSERT_TRUE(bytes_equal(bufs[i].host, want[i].data(), bufs[i].size)) << i;
  for (size_t i = 0; i < bufs.size(); i += 2) ASSERT_OK(dev->free(bufs[i]));
  for (size_t i = 1; i < bufs.size(); i += 2) ASSERT_TRUE(bytes_equal(bufs[i].host, want[i].data(), bufs[i].size)) << i;
}

// ---- queue creation --------------------------------------------------------

TEST(EmuQueueCreation, BadArgumentsAreRefused) {
  std::unique_ptr<emu::EmuDevice> dev;
  ASSERT_OK_AND_ASSIGN(dev, make_small(2, 4));
  struct Case {
    int gpu, engine;
    size_t ring;
    const char* needle;
  };
  const Case cases[] = {
      {-1, 0, 4096, "GPUs 0..1"},   {2, 0, 4096, "GPUs 0..1"},  {0, -1, 4096, "engines 0..3"},
      {0, 4, 4096, "engines 0..3"}, {1, 0, 3000, "power of two"}, {1, 0, 6144, "power of two"},
      {1, 0, 2048, "from 4096 bytes"}, {1, 0, 0, "power of two"},
  };
  for (const Case& c : cases) {
    Result<std::unique_ptr<Queue>> r = make_queue(*dev, c.gpu, c.engine, c.ring);
    ASSERT_FALSE(r.ok()) << c.needle;
    EXPECT_EQ(r.status().code(), Code::invalid_argument);
    EXPECT_TRUE(contains(r.status().message(), c.needle)) << r.status().message();
  }
  // Many queues on one engine, each with its own ring; destroying them returns their memory.
  std::vector<std::unique_ptr<Queue>> qs;
  for (int i = 0; i < 16; ++i) {
    std::unique_ptr<Queue> q;
    ASSERT_OK_AND_ASSIGN(q, make_queue(*dev, 1, 2, 64 << 10));
    qs.push_back(std::move(q));
  }
  std::set<int> ids;
  for (const auto& q : qs) ids.insert(q->id());
  EXPECT_EQ(ids.size(), qs.size());
  qs.clear();
  std::unique_ptr<Queue> q;
  ASSERT_OK_AND_ASSIGN(q, make_queue(*dev, 1, 2, 64 << 10));
  CommandBuffer cb = q->command_buffer();
  ASSERT_OK(SdmaPackets(cb).nop());
  ASSERT_OK(run(*q, cb));
}

TEST(EmuQueueCreation, QueueMayOutliveItsDevice) {
  std::unique_ptr<Queue> q;
  {
    std::unique_ptr<emu::EmuDevice> dev;
    ASSERT_OK_AND_ASSIGN(dev, make_small(1, 1));
    ASSERT_OK_AND_ASSIGN(q, make_queue(*dev, 0, 0, 4096));
    CommandBuffer cb = q->command_buffer();
    ASSERT_OK(SdmaPackets(cb).nop());
    ASSERT_OK(run(*q, cb));
  }
  // The engines are stopped; the queue reports its state without crashing.
  EXPECT_EQ(q->completed(), 4u + frame_bytes(*q));  // the NOP in the queue's frame
  EXPECT_FALSE(q->diagnose().empty());
  q.reset();
}

// UniqueBuffer frees its memory when it dies or is reset, moves ownership,
// and release() hands the plain Buffer back.
TEST(UniqueBuffer, OwnsAndFreesItsMemory) {
  DeviceOptions o;
  o.settings = "preset=small";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Device> dev, open_device(o));
  Buffer seen{};
  {
    ASSERT_OK_AND_ASSIGN(UniqueBuffer a, UniqueBuffer::alloc(*dev, 0, 1 << 16, MemKind::device));
    ASSERT_TRUE(a);
    seen = a.get();
    const uint64_t va = a->va;
    UniqueBuffer b = std::move(a);  // ownership moves; a owns nothing
    EXPECT_FALSE(a);
    EXPECT_EQ(b.get().va, va);
    const Buffer& plain = b;  // passes where a Buffer is taken
    EXPECT_EQ(plain.size, size_t(1) << 16);
  }
  EXPECT_FALSE(dev->free(seen).ok()) << "already freed when the owner died: a second free is refused";
  ASSERT_OK_AND_ASSIGN(UniqueBuffer c, UniqueBuffer::alloc(*dev, 1, 4096, MemKind::device));
  ASSERT_OK(c.reset());
  ASSERT_OK(c.reset());  // a second reset frees nothing
  ASSERT_OK_AND_ASSIGN(UniqueBuffer d, UniqueBuffer::alloc(*dev, 1, 4096, MemKind::device));
  const Buffer kept = d.release();
  EXPECT_FALSE(d);
  ASSERT_OK(dev->free(kept));  // released, not freed: the caller frees it
  EXPECT_EQ(UniqueBuffer::alloc(*dev, 0, 0, MemKind::device).status().code(), Code::invalid_argument);
}

}  // namespace
}  // namespace conccl
