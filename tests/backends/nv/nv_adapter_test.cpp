// tests/backends/nv/nv_adapter_test.cpp - open_device({backend = "nv"}): the
// conccl::Device adapter over nv::Gpu (src/backends/nv/nv_adapter.cpp).
//
// Without /dev/nvidiactl only the refusal and the topology printing run; on an
// H100/H200 with the open 580 module the adapter is opened and exercised.
#include <gtest/gtest.h>

#include <random>
#include <unistd.h>

#include <cstring>

#include "conccl/device.hpp"
#include "backends/nv/nv_device.hpp"
#include "conccl/signal.hpp"
#include "conccl/queue.hpp"
#include "conccl/topology.hpp"

namespace conccl {
namespace {

bool have_driver() { return access("/dev/nvidiactl", F_OK) == 0; }

TEST(NvAdapter, OpenDeviceUnavailableWithoutDriver) {
  if (have_driver()) GTEST_SKIP() << "/dev/nvidiactl exists here";
  DeviceOptions o;
  o.backend = "nv";
  Result<std::unique_ptr<Device>> d = open_device(o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::unavailable) << d.status().to_string();
  const std::string m = d.status().message();
  EXPECT_NE(m.find("/dev/nvidiactl"), std::string::npos) << m;  // the missing device node
  EXPECT_NE(m.find("open NVIDIA kernel module"), std::string::npos) << m;  // what is needed
  EXPECT_NE(m.find("--backend emu"), std::string::npos) << m;  // the fix elsewhere
  EXPECT_NE(m.find("nv"), std::string::npos) << m;
}

TEST(NvAdapter, CopyEngineKindPrints) {
  EXPECT_STREQ(engine_kind_name(EngineKind::copy), "ce");
  Topology t;
  t.backend = "nv";
  GpuInfo g;
  g.name = "NVIDIA H200";
  g.memory_bytes = 141ull << 30;
  g.engines = {{4, EngineKind::copy, 12}, {2, EngineKind::copy, 2}, {3, EngineKind::copy, 2}};
  t.gpus.push_back(g);
  t.notes.push_back("LCE0 (2 PCEs): graphics CE");
  const std::string table = topology_table(t);
  EXPECT_NE(table.find("NVIDIA H200, 3 copy engines (ce: 4 (weight 12) 2 (weight 2) 3 (weight 2))"),
            std::string::npos)
      << table;
  EXPECT_EQ(table.find("SDMA"), std::string::npos) << table;
  EXPECT_NE(table.find("note: LCE0"), std::string::npos) << table;
  const std::string json = topology_json(t);
  EXPECT_NE(json.find("{\"id\": 4, \"kind\": \"ce\", \"weight\": 12}"), std::string::npos) << json;
  // SDMA topologies print as before.
  Topology s;
  s.backend = "emu";
  GpuInfo sg;
  sg.name = "gfx942";
  sg.engines = {{0, EngineKind::pcie, 1}, {1, EngineKind::xgmi, 1}};
  s.gpus.push_back(sg);
  EXPECT_NE(topology_table(s).find("2 engines (1 pcie: 0; 1 xgmi: 1)"), std::string::npos) << topology_table(s);
  EXPECT_EQ(topology_json(s).find("weight"), std::string::npos);
}

TEST(NvAdapter, NativeIsNullForOtherBackends) {
  DeviceOptions o;
  o.backend = "emu";
  o.settings = "preset=small";
  Result<std::unique_ptr<Device>> d = open_device(o);
  if (!d.ok()) GTEST_SKIP() << d.status().to_string();
  EXPECT_EQ(nv::native(**d), nullptr);
}

// MemKind::cuda is CUDA's memory: a backend without CUDA refuses it by name.
TEST(NvAdapter, CudaMemoryNeedsTheNvBackend) {
  DeviceOptions o;
  o.backend = "emu";
  o.settings = "preset=small";
  Result<std::unique_ptr<Device>> d = open_device(o);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  Result<Buffer> b = (*d)->alloc(0, 4096, MemKind::cuda);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Code::unavailable);
  EXPECT_NE(b.status().message().find("nv backend"), std::string::npos) << b.status().message();
  EXPECT_NE(b.status().message().find("emu"), std::string::npos) << b.status().message();
}

// Device::alloc(MemKind::cuda) on the nv backend: CUDA's memory, zeroed,
// mapped for the engines and reachable by compute; free() returns it.
TEST(NvAdapterHw, CudaMemoryFromAlloc) {
  if (!have_driver()) GTEST_SKIP() << "no /dev/nvidiactl";
  if (!nv::cuda_available().ok()) GTEST_SKIP() << nv::cuda_available().to_string();
  DeviceOptions o;
  o.backend = "nv";
  Result<std::unique_ptr<Device>> d = open_device(o);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  Device& dev = **d;
  const size_t n = (2u << 20) + 4096;
  Result<Buffer> c = dev.alloc(0, n, MemKind::cuda);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->kind, MemKind::cuda);
  EXPECT_EQ(c->gpu, 0);
  EXPECT_TRUE(dev.compute_reaches(c->va, n));
  Result<Buffer> h = dev.alloc(0, n, MemKind::host), back = dev.alloc(0, n, MemKind::host);
  ASSERT_TRUE(h.ok() && back.ok());
  Result<std::unique_ptr<Queue>> q = dev.create_queue(0, dev.topology().gpus[0].engines[0].id);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  // Zeroed: read it back through the engines.
  std::memset(back->host, 0x5A, n);
  CommandBuffer cb = (*q)->command_buffer();
  ASSERT_TRUE(cb.copy(back->va, c->va, n).ok());
  QueueSpan span;
  ASSERT_TRUE((*q)->submit(cb, Deadline::after_ms(1000), &span).ok());
  ASSERT_TRUE((*q)->wait_done(Deadline::after_ms(5000), span.end).ok());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(back->as<uint8_t>()[i], 0) << "CUDA memory not zeroed at " << i;
  // Random bytes in and out again.
  std::mt19937_64 rng(2026);
  for (size_t i = 0; i < n / 8; ++i) h->as<uint64_t>()[i] = rng();
  cb.clear();
  ASSERT_TRUE(cb.copy(c->va, h->va, n).ok());
  ASSERT_TRUE(cb.copy(back->va, c->va, n).ok());
  ASSERT_TRUE((*q)->submit(cb, Deadline::after_ms(1000), &span).ok());
  ASSERT_TRUE((*q)->wait_done(Deadline::after_ms(5000), span.end).ok());
  EXPECT_EQ(std::memcmp(back->host, h->host, n), 0);
  EXPECT_TRUE(dev.free(*c).ok());
  EXPECT_FALSE(dev.compute_reaches(c->va, n)) << "free() unregisters the CUDA memory";
  EXPECT_EQ(dev.free(*c).code(), Code::not_found) << "a second free is refused";
  for (Buffer* b : {&*h, &*back}) EXPECT_TRUE(dev.free(*b).ok());
}

TEST(NvAdapterHw, TopologyMemoryQueues) {
  if (!have_driver()) GTEST_SKIP() << "no /dev/nvidiactl";
  DeviceOptions o;
  o.backend = "nv";
  Result<std::unique_ptr<Device>> d = open_device(o);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  Device& dev = **d;
  nv::Gpu* nd = nv::native(dev);
  ASSERT_NE(nd, nullptr);
  const Topology& t = dev.topology();
  std::printf("%s", topology_table(t).c_str());
  EXPECT_EQ(t.backend, "nv");
  ASSERT_EQ(t.gpus.size(), 1u);
  const GpuInfo& g = t.gpus[0];
  EXPECT_FALSE(g.name.empty());
  ASSERT_EQ(g.engines.size(), nd->channel_count());
  for (size_t i = 0; i < g.engines.size(); ++i) {
    EXPECT_EQ(g.engines[i].kind, EngineKind::copy);
    EXPECT_EQ(g.engines[i].id, nd->channel(i).lce());
    EXPECT_EQ(g.engines[i].weight, nd->channel(i).pces());
  }

  // Device memory: zeroed, not CPU-mapped, reachable by the engines.
  const size_t n = 3u << 20;
  Result<Buffer> a = dev.alloc(0, n, MemKind::device);
  Result<Buffer> h = dev.alloc(0, n, MemKind::host);
  ASSERT_TRUE(a.ok() && h.ok()) << a.status().to_string() << h.status().to_string();
  EXPECT_EQ(a->host, nullptr);
  EXPECT_EQ(dev.host_pointer(a->va, 16), nullptr);
  EXPECT_TRUE(dev.is_mapped(a->va, n));
  ASSERT_NE(h->host, nullptr);
  EXPECT_EQ(dev.host_pointer(h->va + 100, 16), h->as<uint8_t>() + 100);
  EXPECT_EQ(dev.host_pointer(h->va + h->size - 8, 16), nullptr) << "range past the end";
  std::memset(h->host, 0x77, n);
  nv::Channel& ch = nd->channel(0);
  CommandBuffer cb = ch.commands();
  ASSERT_TRUE(cb.copy(h->va, a->va, n).ok());
  ASSERT_TRUE(ch.submit(cb, Deadline::after_ms(1000)).ok());
  cb.clear();
  ASSERT_TRUE(ch.wait_done(Deadline::after_ms(5000)).ok()) << ch.diagnose();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(h->as<uint8_t>()[i], 0) << "device memory not zeroed at " << i;

  EXPECT_EQ(g.isa, Isa::hopper());
  // Queues: one GPFIFO channel per create_queue, speaking the vocabulary.
  std::mt19937_64 rng(99);
  auto* hp = h->as<uint64_t>();
  for (size_t i = 0; i < n / 8; ++i) hp[i] = rng();
  Result<Buffer> back = dev.alloc(0, n, MemKind::host);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  Result<Signal> sig = Signal::create(dev);
  ASSERT_TRUE(sig.ok()) << sig.status().to_string();
  EXPECT_FALSE(sig->has_twin());
  for (const EngineInfo& e : g.engines) {
    SCOPED_TRACE("LCE" + std::to_string(e.id));
    Result<std::unique_ptr<Queue>> q = dev.create_queue(0, e.id);
    ASSERT_TRUE(q.ok()) << q.status().to_string();
    EXPECT_EQ((*q)->isa(), Isa::hopper());
    std::memset(back->host, 0, n);
    CommandBuffer cb = (*q)->command_buffer();
    ASSERT_TRUE(cb.copy(a->va, h->va, n).ok());
    ASSERT_TRUE(cb.copy(back->va, a->va, n).ok());
    ASSERT_TRUE(sig->signal_add(cb, 1).ok());
    uint64_t end = 0;
    QueueSpan end_span;
    ASSERT_TRUE((*q)->submit(cb, Deadline::after_ms(1000), &end_span).ok());
    end = end_span.end;
    ASSERT_TRUE((*q)->wait_done(Deadline::after_ms(5000), end).ok()) << (*q)->diagnose();
    EXPECT_EQ(std::memcmp(back->host, h->host, n), 0);
    // A second queue waits on the first one's signal (64-bit acquire).
    Result<std::unique_ptr<Queue>> q2 = dev.create_queue(0, e.id);
    ASSERT_TRUE(q2.ok()) << q2.status().to_string();
    const uint64_t want = sig->value() + 1;
    CommandBuffer w = (*q2)->command_buffer();
    ASSERT_TRUE(sig->wait_ge(w, want).ok());
    ASSERT_TRUE(w.fill(back->va, 0x1234567u, 4096).ok());
    ASSERT_TRUE((*q2)->submit(w, Deadline::after_ms(1000), &end_span).ok());
    end = end_span.end;
    EXPECT_EQ((*q2)->wait_done(Deadline::after_ms(20), end).code(), Code::timeout) << "waits for the signal";
    sig->add(1);
    ASSERT_TRUE((*q2)->wait_done(Deadline::after_ms(5000), end).ok()) << (*q2)->diagnose();
    EXPECT_EQ(back->as<uint32_t>()[1023], 0x1234567u);
  }
  Result<std::unique_ptr<Queue>> grce = dev.create_queue(0, 0);
  EXPECT_EQ(grce.status().code(), Code::invalid_argument) << grce.status().to_string();
  (void)dev.free(*back);

  EXPECT_TRUE(dev.free(*a).ok());
  EXPECT_TRUE(dev.free(*h).ok());
  EXPECT_EQ(dev.free(*h).code(), Code::not_found);
  EXPECT_FALSE(dev.is_mapped(a->va, 16));
}

}  // namespace
}  // namespace conccl
