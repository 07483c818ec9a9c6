// tests/backends/kfd/kfd_policy_test.cpp - the KFD backend's decisions that need
// no driver: queue mode per KFD version and thunk capability, queue type and
// engine argument per engine, ring sizes, memory flags and mappings, error
// mapping, and open_device(kfd) on a machine without an AMD GPU.
#include <gtest/gtest.h>

#include <tuple>

#include <sys/stat.h>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "conccl/emu.hpp"
#include "backends/kfd/kfd_policy.hpp"
#include "conccl/queue.hpp"
#include "packets/sdma_codec.hpp"

namespace {

using conccl::Code;
using conccl::kfd::Capabilities;
using conccl::kfd::GpuNode;
using conccl::kfd::KmtStatus;
using conccl::kfd::MemUse;
using conccl::kfd::QueueMode;
using conccl::kfd::ThunkQueueType;

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

GpuNode mi300x_gpu() {
  GpuNode g;
  g.index = 3;
  g.gfx = "gfx942";
  g.gen = conccl::sdma::Gen::v4_4_2;
  g.num_sdma = 2;
  g.num_xgmi = 14;
  g.queues_per_engine = 8;
  return g;
}

GpuNode navi31_gpu() {
  GpuNode g;
  g.index = 0;
  g.gfx = "gfx1100";
  g.gen = conccl::sdma::Gen::v6;
  g.num_sdma = 2;
  g.num_xgmi = 0;
  g.queues_per_engine = 6;
  return g;
}

// ---------------------------------------------------------------------------
// queue mode: KFD version x thunk capability

TEST(KfdQueueMode, Matrix) {
  struct Case {
    bool ext;
    uint32_t major, minor;
    QueueMode want;
    const char* why;  // a phrase the reason must contain
  };
  const Case cases[] = {
      {false, 1, 11, QueueMode::kernel_chooses, "no hsaKmtCreateQueueExt"},   // bookworm: thunk 5.2.3, Linux 6.1
      {false, 1, 17, QueueMode::kernel_chooses, "rebuild against ROCm >= 6.3"},
      {false, 1, 16, QueueMode::kernel_chooses, "KFD >= 1.17"},
      {true, 1, 16, QueueMode::kernel_chooses, "older than 1.17"},
      {true, 1, 14, QueueMode::kernel_chooses, "Linux >= 6.12"},
      {true, 1, 17, QueueMode::by_engine_id, "HSA_QUEUE_SDMA_BY_ENG_ID"},
      {true, 1, 18, QueueMode::by_engine_id, "exactly the engine"},
      {true, 2, 0, QueueMode::by_engine_id, "2.0"},
      {true, 0, 0, QueueMode::kernel_chooses, "unknown"},
  };
  for (const Case& c : cases) {
    const conccl::kfd::QueueModeDecision d = conccl::kfd::decide_queue_mode(Capabilities{c.major, c.minor, c.ext});
    EXPECT_EQ(d.mode, c.want) << c.major << "." << c.minor << " ext=" << c.ext;
    EXPECT_TRUE(contains(d.reason, c.why)) << d.reason;
  }
  EXPECT_STREQ(conccl::kfd::queue_mode_name(QueueMode::by_engine_id), "by-engine-id");
  EXPECT_STREQ(conccl::kfd::queue_mode_name(QueueMode::kernel_chooses), "kernel-chooses");
}

TEST(KfdQueuePlan, ByEngineIdPinsEveryEngine) {
  const GpuNode g = mi300x_gpu();
  for (int e = 0; e < 16; ++e) {
    conccl::Result<conccl::kfd::QueuePlan> p = conccl::kfd::plan_queue(QueueMode::by_engine_id, g, e);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(p->type, ThunkQueueType::sdma_by_eng_id);
    EXPECT_EQ(p->sdma_engine_id, static_cast<uint32_t>(e));
    EXPECT_TRUE(p->pinned);
  }
}

// ROCr does not pin SDMA engines on gfx9 below gfx90a; neither do we, even
// where the kernel and thunk could (amd_gpu_agent.cpp).
TEST(KfdQueuePlan, Gfx908IsNeverPinned) {
  GpuNode g = mi300x_gpu();
  for (auto [version, gfx, pinned] : {std::tuple{90008u, "gfx908", false}, std::tuple{90006u, "gfx906", false},
                                      std::tuple{90010u, "gfx90a", true}, std::tuple{90402u, "gfx942", true}}) {
    g.gfx_target_version = version;
    g.gfx = gfx;
    conccl::Result<conccl::kfd::QueuePlan> p = conccl::kfd::plan_queue(QueueMode::by_engine_id, g, 5);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(p->pinned, pinned) << gfx;
    EXPECT_EQ(p->type, pinned ? ThunkQueueType::sdma_by_eng_id : ThunkQueueType::sdma_xgmi) << gfx;
    if (!pinned) {
      EXPECT_TRUE(contains(p->placement, "not pinned, as ROCr does not pin it")) << p->placement;
    }
  }
}

// ROCr leaves the engine to KFD on GPUs without xGMI engines ("resources are
// limited": each pinned queue costs a CWSR area and an EOP buffer;
// amd_gpu_agent.cpp), so by default so do we; pin_engines=on pins them anyway,
// pin_engines=off pins nothing, and gfx9 below gfx90a stays unpinned whatever.
TEST(KfdQueuePlan, GpusWithoutXgmiEnginesArePinnedOnlyWhenAskedTo) {
  using Pin = conccl::kfd::Options::Pin;
  const GpuNode rdna = navi31_gpu(), mi300 = mi300x_gpu();
  GpuNode mi100 = mi300x_gpu();
  mi100.gfx_target_version = 90008;
  mi100.gfx = "gfx908";
  struct Case {
    const GpuNode* g;
    Pin pin;
    bool pinned;
    const char* why;  // in the placement text
  };
  const Case cases[] = {
      {&rdna, Pin::auto_, false, "has no xGMI engines, so its queues are not pinned, as ROCr does not pin them"},
      {&rdna, Pin::on, true, "pinned with HSA_QUEUE_SDMA_BY_ENG_ID"},
      {&rdna, Pin::off, false, "not pinned (pin_engines=off)"},
      {&mi300, Pin::auto_, true, "pinned with HSA_QUEUE_SDMA_BY_ENG_ID"},
      {&mi300, Pin::on, true, "pinned with HSA_QUEUE_SDMA_BY_ENG_ID"},
      {&mi300, Pin::off, false, "not pinned (pin_engines=off)"},
      {&mi100, Pin::on, false, "not pinned, as ROCr does not pin it"},
  };
  for (const Case& c : cases) {
    conccl::Result<conccl::kfd::QueuePlan> p = conccl::kfd::plan_queue(QueueMode::by_engine_id, *c.g, 1, c.pin);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    SCOPED_TRACE(c.g->gfx + " pin " + std::to_string(static_cast<int>(c.pin)));
    EXPECT_EQ(p->pinned, c.pinned);
    EXPECT_EQ(p->type, c.pinned ? ThunkQueueType::sdma_by_eng_id : ThunkQueueType::sdma);
    EXPECT_TRUE(contains(p->placement, c.why)) << p->placement;
  }
  // Without by-engine-id support nothing is pinned, whatever pin_engines says.
  EXPECT_FALSE(conccl::kfd::plan_queue(QueueMode::kernel_chooses, rdna, 1, Pin::on)->pinned);
}

TEST(KfdQueuePlan, KernelChoosesPicksThePoolByEngineKind) {
  const GpuNode g = mi300x_gpu();
  for (int e = 0; e < 16; ++e) {
    conccl::Result<conccl::kfd::QueuePlan> p = conccl::kfd::plan_queue(QueueMode::kernel_chooses, g, e);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->type, e < 2 ? ThunkQueueType::sdma : ThunkQueueType::sdma_xgmi) << e;
    EXPECT_EQ(p->sdma_engine_id, 0u);
    EXPECT_FALSE(p->pinned);
    EXPECT_TRUE(contains(p->placement, "not necessarily engine " + std::to_string(e))) << p->placement;
  }
  EXPECT_TRUE(contains(conccl::kfd::plan_queue(QueueMode::kernel_chooses, g, 5)->placement, "engines 2-15"));
  EXPECT_TRUE(contains(conccl::kfd::plan_queue(QueueMode::kernel_chooses, g, 1)->placement, "engines 0-1"));
}

TEST(KfdQueuePlan, EngineOutOfRange) {
  for (QueueMode m : {QueueMode::by_engine_id, QueueMode::kernel_chooses}) {
    conccl::Result<conccl::kfd::QueuePlan> p = conccl::kfd::plan_queue(m, mi300x_gpu(), 16);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), Code::invalid_argument);
    EXPECT_TRUE(contains(p.status().message(), "engine 16 is out of range: gpu 3 (gfx942) has engines 0..15 "
                                               "(2 PCIe: 0-1, 14 xGMI: 2-15)"))
        << p.status().message();
    EXPECT_EQ(conccl::kfd::plan_queue(m, mi300x_gpu(), -1).status().code(), Code::invalid_argument);
  }
  conccl::Result<conccl::kfd::QueuePlan> p = conccl::kfd::plan_queue(QueueMode::kernel_chooses, navi31_gpu(), 2);
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(contains(p.status().message(), "engines 0..1 (2 PCIe: 0-1, 0 xGMI)")) << p.status().message();
}

TEST(KfdQueuePlan, RingSizes) {
  EXPECT_TRUE(conccl::kfd::check_ring_bytes(4096).ok());
  EXPECT_TRUE(conccl::kfd::check_ring_bytes(1 << 20).ok());
  EXPECT_TRUE(conccl::kfd::check_ring_bytes(size_t(1) << 30).ok());
  for (size_t bad : {size_t(0), size_t(2048), size_t(4097), size_t(3) << 12, size_t(1) << 31}) {
    conccl::Status st = conccl::kfd::check_ring_bytes(bad);
    EXPECT_EQ(st.code(), Code::invalid_argument) << bad;
    EXPECT_TRUE(contains(st.message(), "power of two")) << st.message();
  }
}

// ---------------------------------------------------------------------------
// memory flags: bit positions of hsakmttypes.h HsaMemFlags (checked against
// the real header in kfd_abi_test.cpp when libhsakmt is present).

constexpr uint32_t kNonPaged = 1u << 0, kHostAccess = 1u << 6, kNoSubstitute = 1u << 7, kExecute = 1u << 12,
                   kCoarseGrain = 1u << 13, kNoNumaBind = 1u << 16, kUncached = 1u << 17;

TEST(KfdMemFlags, PerUse) {
  // Ring: kfdtest/DMA-Latte's queue buffer.
  EXPECT_EQ(conccl::kfd::mem_flags_for(MemUse::ring).bits(), kHostAccess | kExecute | kNoNumaBind | kUncached);
  EXPECT_EQ(conccl::kfd::mem_flags_for(MemUse::ring).bits(), 0x31040u);
  // Host buffers: fine-grained, GPU-uncached, not executable, paged (userptr).
  EXPECT_EQ(conccl::kfd::mem_flags_for(MemUse::host).bits(), kHostAccess | kNoNumaBind | kUncached);
  // VRAM: NonPaged on a GPU node, coarse-grained, no silent fallback to system memory.
  EXPECT_EQ(conccl::kfd::mem_flags_for(MemUse::device).bits(), kNonPaged | kHostAccess | kNoSubstitute | kCoarseGrain);
  EXPECT_EQ(conccl::kfd::mem_flags_for(MemUse::device_hidden).bits(), kNonPaged | kNoSubstitute | kCoarseGrain);
  // libhsakmt rejects CoarseGrain together with Uncached (memory.c).
  for (MemUse u : {MemUse::ring, MemUse::host, MemUse::device, MemUse::device_hidden}) {
    const conccl::kfd::MemFlags f = conccl::kfd::mem_flags_for(u);
    EXPECT_FALSE(f.coarse_grain && f.uncached) << conccl::kfd::mem_use_name(u);
    EXPECT_EQ(f.page_size, 0) << "4 KiB pages";
  }
  EXPECT_EQ(conccl::kfd::mem_flags_for(MemUse::ring).describe(), "HostAccess ExecuteAccess NoNUMABind Uncached PageSize=4KB");
}

conccl::kfd::KfdTopology three_gpus() {
  // gpu 0 <-> gpu 1 linked (listed on gpu 0 only), gpu 2 alone.
  conccl::kfd::KfdTopology t;
  for (int i = 0; i < 3; ++i) {
    GpuNode g = mi300x_gpu();
    g.index = i;
    g.thunk_node = i + 1;
    t.gpus.push_back(g);
    conccl::GpuInfo gi;
    gi.index = i;
    t.topology.gpus.push_back(gi);
  }
  t.topology.gpus[0].links.push_back(conccl::LinkInfo{1, "xgmi", 15, {2}});
  return t;
}

TEST(KfdMemFlags, MapTargets) {
  const conccl::kfd::KfdTopology t = three_gpus();
  EXPECT_EQ(conccl::kfd::map_targets(t, MemUse::ring, 2), std::vector<int>{2});
  EXPECT_EQ(conccl::kfd::map_targets(t, MemUse::host, -1), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(conccl::kfd::map_targets(t, MemUse::device, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(conccl::kfd::map_targets(t, MemUse::device, 1), (std::vector<int>{1, 0}));  // link listed on the peer
  EXPECT_EQ(conccl::kfd::map_targets(t, MemUse::device_hidden, 2), std::vector<int>{2});
  EXPECT_TRUE(conccl::kfd::map_targets(t, MemUse::device, 7).empty());
}

// ---------------------------------------------------------------------------
// errors

TEST(KfdErrors, OpenErrorsNameCauseAndFix) {
  conccl::Status st = conccl::kfd::open_error(ENOENT, "/dev/kfd");
  EXPECT_EQ(st.code(), Code::unavailable);
  EXPECT_TRUE(contains(st.message(), "no /dev/kfd"));
  EXPECT_TRUE(contains(st.message(), "modprobe amdgpu"));
  EXPECT_TRUE(contains(st.message(), "--device=/dev/kfd"));
  for (int e : {EACCES, EPERM}) {
    st = conccl::kfd::open_error(e, "/dev/kfd");
    EXPECT_EQ(st.code(), Code::unavailable);
    EXPECT_TRUE(contains(st.message(), "permission denied opening /dev/kfd"));
    EXPECT_TRUE(contains(st.message(), "usermod -aG render,video"));
  }
  st = conccl::kfd::open_error(ENXIO, "/dev/kfd");
  EXPECT_TRUE(contains(st.message(), "dmesg"));
  EXPECT_TRUE(conccl::kfd::open_error(0, "/dev/kfd").ok());
}

TEST(KfdErrors, ProbeDeviceNode) {
  conccl::Status st = conccl::kfd::probe_device_node("/nonexistent/kfd");
  EXPECT_EQ(st.code(), Code::unavailable);
  EXPECT_TRUE(contains(st.message(), "no /nonexistent/kfd")) << st.message();
  EXPECT_TRUE(conccl::kfd::probe_device_node("/dev/null").ok());
  // A directory cannot be opened read-write.
  EXPECT_EQ(conccl::kfd::probe_device_node("/").code(), Code::unavailable);
}

TEST(KfdErrors, ThunkStatusAndErrnoMapToCodes) {
  using conccl::kfd::thunk_error;
  EXPECT_EQ(thunk_error("x", int(KmtStatus::no_memory), 0, "").code(), Code::resource_exhausted);
  EXPECT_EQ(thunk_error("x", int(KmtStatus::out_of_resources), 0, "").code(), Code::resource_exhausted);
  EXPECT_EQ(thunk_error("x", int(KmtStatus::invalid_parameter), 0, "").code(), Code::invalid_argument);
  EXPECT_EQ(thunk_error("x", int(KmtStatus::memory_already_registered), 0, "").code(), Code::busy);
  EXPECT_EQ(thunk_error("x", int(KmtStatus::wait_timeout), 0, "").code(), Code::timeout);
  EXPECT_EQ(thunk_error("x", int(KmtStatus::not_supported), 0, "").code(), Code::unavailable);
  EXPECT_TRUE(thunk_error("x", int(KmtStatus::success), 0, "").ok());
  // The 5.2.3 thunk says HSAKMT_STATUS_ERROR for every kernel error; errno tells.
  EXPECT_EQ(thunk_error("x", int(KmtStatus::error), ENOMEM, "").code(), Code::resource_exhausted);
  EXPECT_EQ(thunk_error("x", int(KmtStatus::error), EINVAL, "").code(), Code::invalid_argument);
  EXPECT_EQ(thunk_error("x", int(KmtStatus::error), EPERM, "").code(), Code::unavailable);
  conccl::Status st = thunk_error("hsaKmtAllocMemory", int(KmtStatus::error), ENOMEM, "free some memory");
  EXPECT_EQ(st.message(), "hsaKmtAllocMemory failed: HSAKMT_STATUS_ERROR, " + std::string(std::strerror(ENOMEM)) +
                              " (errno 12); free some memory");
  EXPECT_STREQ(conccl::kfd::kmt_status_name(31), "HSAKMT_STATUS_WAIT_TIMEOUT");
  EXPECT_STREQ(conccl::kfd::kmt_status_name(999), "HSAKMT_STATUS_<unknown>");
}

TEST(KfdErrors, OutOfSdmaQueues) {
  const GpuNode g = mi300x_gpu();
  conccl::kfd::QueuePlan pinned = *conccl::kfd::plan_queue(QueueMode::by_engine_id, g, 7);
  // New thunks map -ENOMEM to NO_MEMORY; 5.2.3 leaves it in errno.
  for (auto [status, err] : {std::pair{int(KmtStatus::no_memory), 0}, std::pair{int(KmtStatus::error), ENOMEM}}) {
    conccl::Status st = conccl::kfd::queue_create_error(status, err, g, 7, pinned);
    EXPECT_EQ(st.code(), Code::resource_exhausted);
    EXPECT_TRUE(contains(st.message(), "hsaKmtCreateQueueExt(HSA_QUEUE_SDMA_BY_ENG_ID) for gpu 3 engine 7"))
        << st.message();
    EXPECT_TRUE(contains(st.message(), "no free SDMA queue slot on engine 7 of gpu 3"));
    EXPECT_TRUE(contains(st.message(), "8 queues per engine, shared by every process"));
    EXPECT_TRUE(contains(st.message(), "reuse queues"));
  }
  conccl::kfd::QueuePlan pool = *conccl::kfd::plan_queue(QueueMode::kernel_chooses, g, 9);
  conccl::Status st = conccl::kfd::queue_create_error(int(KmtStatus::error), ENOMEM, g, 9, pool);
  EXPECT_TRUE(contains(st.message(), "hsaKmtCreateQueue(HSA_QUEUE_SDMA_XGMI)")) << st.message();
  EXPECT_TRUE(contains(st.message(), "the xGMI engine pool of gpu 3"));
  // No reason at all (old thunk, errno clobbered): still the likely cause.
  st = conccl::kfd::queue_create_error(int(KmtStatus::error), 0, g, 9, pool);
  EXPECT_EQ(st.code(), Code::resource_exhausted);
  EXPECT_TRUE(contains(st.message(), "No more SDMA queue to allocate"));
  st = conccl::kfd::queue_create_error(int(KmtStatus::error), EINVAL, g, 9, pool);
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_TRUE(contains(st.message(), "sdma-probe list --backend kfd"));
}

TEST(KfdErrors, OpenKfdOutcomes) {
  using conccl::kfd::open_kfd_error;
  EXPECT_TRUE(open_kfd_error(int(KmtStatus::success), 0, "/dev/kfd").ok());
  EXPECT_TRUE(open_kfd_error(int(KmtStatus::kernel_already_opened), 0, "/dev/kfd").ok());
  conccl::Status st = open_kfd_error(int(KmtStatus::kernel_io_channel_not_opened), EACCES, "/dev/kfd");
  EXPECT_EQ(st.code(), Code::unavailable);
  EXPECT_TRUE(contains(st.message(), "permission denied"));
  st = open_kfd_error(int(KmtStatus::kernel_io_channel_not_opened), 0, "/dev/kfd");
  EXPECT_TRUE(contains(st.message(), "no /dev/kfd"));
  st = open_kfd_error(int(KmtStatus::driver_mismatch), 0, "/dev/kfd");
  EXPECT_EQ(st.code(), Code::unavailable);
  EXPECT_TRUE(contains(st.message(), "major version"));
}

TEST(KfdWait, SliceMilliseconds) {
  using namespace std::chrono;
  EXPECT_EQ(conccl::kfd::wait_slice_ms(nanoseconds(0)), 1u);
  EXPECT_EQ(conccl::kfd::wait_slice_ms(nanoseconds(1)), 1u);
  EXPECT_EQ(conccl::kfd::wait_slice_ms(microseconds(1500)), 2u);
  EXPECT_EQ(conccl::kfd::wait_slice_ms(milliseconds(40)), 40u);
  EXPECT_EQ(conccl::kfd::wait_slice_ms(seconds(100)), 1000u);
  EXPECT_EQ(conccl::kfd::wait_slice_ms(seconds(100), 50), 50u);
}

// ---------------------------------------------------------------------------
// the wake-up tail

TEST(KfdWakeup, FenceToMailboxThenTrap) {
  conccl::CommandBuffer cb(conccl::sdma::Gen::v4_4_2);
  ASSERT_TRUE(conccl::kfd::record_wake(cb, 37, 0x7f0000001008ull).ok());
  ASSERT_EQ(cb.packet_count(), 2u);
  const auto dw = cb.dwords();
  conccl::Result<conccl::sdma::Packet> fence = conccl::sdma::decode(cb.gen(), dw);
  ASSERT_TRUE(fence.ok());
  EXPECT_EQ(fence->pkt, conccl::sdma::Pkt::fence);
  EXPECT_EQ(dw[1], 0x00001008u);  // mailbox address lo
  EXPECT_EQ(dw[2], 0x00007f00u);  // hi
  EXPECT_EQ(dw[3], 37u);          // the event id
  conccl::Result<conccl::sdma::Packet> trap = conccl::sdma::decode(cb.gen(), dw.subspan(cb.packet_starts()[1]));
  ASSERT_TRUE(trap.ok());
  EXPECT_EQ(trap->pkt, conccl::sdma::Pkt::trap);
  EXPECT_EQ(dw[cb.packet_starts()[1] + 1], 37u);

  conccl::CommandBuffer no_mailbox(conccl::sdma::Gen::v4_4_2);
  ASSERT_TRUE(conccl::kfd::record_wake(no_mailbox, 5, 0).ok());
  EXPECT_EQ(no_mailbox.packet_count(), 1u);
}

TEST(KfdWakeup, WakesAnEmulatedHost) {
  conccl::DeviceOptions o;
  o.settings = "preset=small";
  conccl::Result<std::unique_ptr<conccl::emu::EmuDevice>> dev = conccl::emu::create(o);
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  conccl::Result<std::unique_ptr<conccl::Queue>> q = (*dev)->create_queue(0, 0, conccl::QueueOptions{1 << 16});
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  conccl::CommandBuffer cb = (*q)->command_buffer();
  ASSERT_TRUE((*q)->record_wake(cb).ok());
  ASSERT_TRUE((*q)->submit(cb, conccl::Deadline::after_ms(5000)).ok());
  EXPECT_TRUE((*q)->wake_event()->wait(1, conccl::Deadline::after_ms(5000)).ok());
}

// ---------------------------------------------------------------------------
// open_device(kfd) here: there is no AMD GPU on this machine (or no
// libhsakmt in this build); either way an error that says why, never a crash.

TEST(KfdOpen, WithoutHardwareIsUnavailable) {
  if (std::filesystem::exists("/dev/kfd")) GTEST_SKIP() << "/dev/kfd exists: the hardware tests cover open()";
  conccl::DeviceOptions o;
  o.backend = "kfd";
  conccl::Result<std::unique_ptr<conccl::Device>> d = conccl::open_device(o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::unavailable);
  if (conccl::kfd::built_with_libhsakmt())
    EXPECT_TRUE(contains(d.status().message(), "no /dev/kfd")) << d.status().message();
  else
    EXPECT_TRUE(contains(d.status().message(), "built without libhsakmt: install libhsakmt-dev"))
        << d.status().message();
}

TEST(KfdOpen, OptionsAreHonoured) {
  conccl::kfd::Options o;
  o.device_path = "/nonexistent/kfd";
  conccl::Result<std::unique_ptr<conccl::kfd::KfdDevice>> d = conccl::kfd::open(o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::unavailable);
  if (conccl::kfd::built_with_libhsakmt()) {
    EXPECT_TRUE(contains(d.status().message(), "no /nonexistent/kfd")) << d.status().message();
    EXPECT_TRUE(contains(conccl::kfd::build_description(), "libhsakmt"));
  } else {
    EXPECT_EQ(conccl::kfd::build_description(), "not built with libhsakmt");
  }
}

// With a fixture topology and openable device nodes, open() gets as far as
// libhsakmt's own open of /dev/kfd, which fails here: its error must be
// mapped, not crash.
TEST(KfdOpen, ThunkOpenFailureIsMapped) {
  if (!conccl::kfd::built_with_libhsakmt()) GTEST_SKIP() << "built without libhsakmt";
  if (std::filesystem::exists("/dev/kfd")) GTEST_SKIP() << "/dev/kfd exists here";
  conccl::kfd::Options o;
  o.device_path = "/dev/null";
  o.sysfs_root = std::string(KFD_FIXTURES) + "/rx7900xtx/topology";
  o.dri_dir = "/nonexistent/dri";  // renderD128 cannot be opened: the only GPU is skipped
  conccl::Result<std::unique_ptr<conccl::kfd::KfdDevice>> d = conccl::kfd::open(o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::not_found);
  EXPECT_TRUE(contains(d.status().message(), "cannot open its render node")) << d.status().message();

  // A stand-in render node that opens: now libhsakmt itself runs and fails.
  const std::filesystem::path dri =
      std::filesystem::temp_directory_path() / ("conccl_dri_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dri);
  { std::FILE* f = std::fopen((dri / "renderD128").c_str(), "w"); ASSERT_NE(f, nullptr); std::fclose(f); }
  o.dri_dir = dri.string();
  d = conccl::kfd::open(o);
  std::filesystem::remove_all(dri);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::unavailable);
  EXPECT_TRUE(contains(d.status().message(), "no /dev/kfd")) << d.status().message();
}

}  // namespace

namespace {

using conccl::kfd::decide_trap;
using conccl::kfd::Options;
using conccl::kfd::ThunkSharing;

// Issue #14, defect 1: which thunk owns the events page decides TRAP wake-ups.
TEST(KfdTrap, PrivateThunkInHsaRuntimeTurnsTrapsOff) {
  // Issue #31, item 1: with no libhsa-runtime64 loaded yet, auto creates no event (a HIP
  // initialised later would find KFD's one events page taken); the note says how to opt in.
  const auto alone = decide_trap(Options::Trap::auto_, "", ThunkSharing{});
  EXPECT_FALSE(alone.trap_wakeups);
  EXPECT_NE(alone.reason.find("CONCCL_KFD_TRAP=1"), std::string::npos) << alone.reason;
  EXPECT_TRUE(decide_trap(Options::Trap::auto_, "", ThunkSharing{true, false}).trap_wakeups);  // shared .so
  const auto priv = decide_trap(Options::Trap::auto_, "", ThunkSharing{true, true});
  EXPECT_FALSE(priv.trap_wakeups);
  EXPECT_NE(priv.reason.find("its own libhsakmt"), std::string::npos) << priv.reason;
  EXPECT_TRUE(decide_trap(Options::Trap::auto_, "1", ThunkSharing{true, true}).trap_wakeups);
  EXPECT_FALSE(decide_trap(Options::Trap::on, "0", ThunkSharing{}).trap_wakeups);
  EXPECT_FALSE(decide_trap(Options::Trap::off, "", ThunkSharing{}).trap_wakeups);
  EXPECT_TRUE(decide_trap(Options::Trap::on, "", ThunkSharing{true, true}).trap_wakeups);
  // KFD's "Event page is already set" (-EINVAL) as the thunks report it.
  EXPECT_TRUE(conccl::kfd::is_events_page_conflict(1 /* HSAKMT_STATUS_ERROR */, EINVAL));
  EXPECT_TRUE(conccl::kfd::is_events_page_conflict(3 /* INVALID_PARAMETER */, 0));
  EXPECT_FALSE(conccl::kfd::is_events_page_conflict(1, ENOMEM));
}

}  // namespace

// The thunk allocates a CWSR area only for by-engine-id SDMA queues
// (libhsakmt queues.c handle_concrete_asic returns early for SDMA, SDMA_XGMI).
TEST(KfdPolicy, PerQueueBytesFollowTheQueueMode) {
  conccl::kfd::CwsrEstimate c;
  c.bytes = 186019840;
  EXPECT_EQ(conccl::kfd::per_queue_bytes(conccl::kfd::QueueMode::by_engine_id, c), 186019840u);
  EXPECT_EQ(conccl::kfd::per_queue_bytes(conccl::kfd::QueueMode::kernel_chooses, c), 0u);
}

// Fresh VRAM: large or CPU-invisible by an SDMA fill, small by the CPU; host memory by the CPU.
TEST(KfdPolicy, HowFreshMemoryIsZeroed) {
  using conccl::kfd::MemUse;
  using conccl::kfd::ZeroBy;
  using conccl::kfd::zero_by;
  constexpr size_t kMin = conccl::kfd::kSdmaZeroMinBytes;
  EXPECT_EQ(kMin, size_t(1) << 20);
  EXPECT_EQ(zero_by(MemUse::device, 4096), ZeroBy::cpu);
  EXPECT_EQ(zero_by(MemUse::device, kMin - 4096), ZeroBy::cpu);
  EXPECT_EQ(zero_by(MemUse::device, kMin), ZeroBy::sdma);
  EXPECT_EQ(zero_by(MemUse::device, size_t(64) << 30), ZeroBy::sdma);
  EXPECT_EQ(zero_by(MemUse::device_hidden, 4096), ZeroBy::sdma);  // the CPU cannot reach it
  EXPECT_EQ(zero_by(MemUse::host, size_t(1) << 30), ZeroBy::cpu);
  EXPECT_EQ(zero_by(MemUse::ring, 1 << 20), ZeroBy::cpu);
  EXPECT_EQ(conccl::kfd::sdma_zero_timeout(4096).count(), 30000);
  EXPECT_EQ(conccl::kfd::sdma_zero_timeout(size_t(64) << 30).count(), 30000 + 64000);
}
