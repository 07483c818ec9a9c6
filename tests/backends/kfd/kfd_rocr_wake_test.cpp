// tests/backends/kfd/kfd_rocr_wake_test.cpp - host waits that sleep on the
// interrupt signals of an hsa-runtime in the process (issue #31, item 1;
// src/backends/kfd/rocr_wake.hpp), against fake_hsakmt and a fake
// libhsa-runtime64.so.1 (fake_hsa_runtime.cpp) that, like ROCm >= 6.3's,
// carries no hsaKmt* of ours. Each test dlopen()s the fake by path before
// opening the device and unloads it at the end, so the other tests of this
// binary see no hsa-runtime. What the fakes cannot show: that ROCr's own
// events are raised by our TRAPs on a GPU (not yet run on an AMD GPU).
#if defined(CONCCL_HSAKMT_NESTED_HEADER)
#include <hsakmt/hsakmt.h>
#else
#include <hsakmt.h>
#endif

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "backends/kfd/kfd_policy.hpp"
#include "backends/kfd/rocr_wake.hpp"
#include "conccl/kfd.hpp"
#include "conccl/queue.hpp"
#include "conccl/sdma_packets.hpp"
#include "fixture_topologies.hpp"
#include "fake_hsakmt.hpp"
#include "fake_kfd_fixture.hpp"
#include "packets/sdma_codec.hpp"

#if __has_include(<hsa/hsa.h>) && __has_include(<hsa/amd_hsa_signal.h>)
#include <hsa/amd_hsa_signal.h>
#include <hsa/hsa.h>

#include <cstddef>
// Our declarations of the hsa-runtime ABI (rocr_wake.hpp) against the real
// headers, where they are installed.
namespace hsaabi = conccl::kfd::detail::hsa_abi;
static_assert(hsaabi::kTimestampFrequency == HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY);
static_assert(hsaabi::kConditionGte == HSA_SIGNAL_CONDITION_GTE);
static_assert(hsaabi::kWaitStateBlocked == HSA_WAIT_STATE_BLOCKED);
static_assert(hsaabi::kSuccess == HSA_STATUS_SUCCESS);
static_assert(sizeof(hsaabi::Signal) == sizeof(hsa_signal_t));
static_assert(sizeof(hsaabi::SignalValue) == sizeof(hsa_signal_value_t));
static_assert(hsaabi::kValueOffset == offsetof(amd_signal_t, value));
static_assert(hsaabi::kMailboxOffset == offsetof(amd_signal_t, event_mailbox_ptr));
static_assert(hsaabi::kEventIdOffset == offsetof(amd_signal_t, event_id));
#endif

namespace conccl {
namespace {

namespace fs = std::filesystem;

// The fake hsa-runtime's test hooks, found with dlsym.
struct FakeRocr {
  void* h = nullptr;
  void (*arena)(uint64_t*, uint64_t*) = nullptr;
  void (*reset)() = nullptr;
  int (*live_signals)() = nullptr;
  int (*init_refs)() = nullptr;
  int (*init_calls)() = nullptr;
  int (*shut_down_calls)() = nullptr;
  int (*blocked_waits)() = nullptr;
  uint64_t (*mailbox)(uint32_t) = nullptr;

  template <typename F>
  void find(F* f, const char* name) {
    void* p = dlsym(h, name);
    ASSERT_NE(p, nullptr) << name;
    std::memcpy(f, &p, sizeof p);
  }
  void load(const char* path) {
    h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    ASSERT_NE(h, nullptr) << dlerror();
    find(&arena, "fake_hsa_arena");
    find(&reset, "fake_hsa_reset");
    find(&live_signals, "fake_hsa_live_signals");
    find(&init_refs, "fake_hsa_init_refs");
    find(&init_calls, "fake_hsa_init_calls");
    find(&shut_down_calls, "fake_hsa_shut_down_calls");
    find(&blocked_waits, "fake_hsa_blocked_waits");
    find(&mailbox, "fake_hsa_mailbox");
    reset();
    uint64_t base = 0, bytes = 0;
    arena(&base, &bytes);
    fakekmt::map_foreign(base, bytes);  // ROCr maps its signals to every GPU
  }
};

class KfdRocrWake : public fakekmt::FakeKfdTest {
 protected:
  KfdRocrWake() : FakeKfdTest("conccl_rocr_dri_") {}

  void SetUp() override {
    FakeKfdTest::SetUp();
    ::unsetenv("CONCCL_KFD_TRAP");
    ::unsetenv("CONCCL_KFD_ROCR_WAKE");
  }
  void TearDown() override {
    ::unsetenv("CONCCL_KFD_ROCR_WAKE");
    FakeKfdTest::TearDown();
    EXPECT_EQ(fakekmt::stats().events_created, 0) << "no KFD event of any type: KFD's one events page is ROCr's";
    if (rocr_.h) {
      EXPECT_EQ(rocr_.live_signals(), 0) << "every ROCr signal destroyed";
      EXPECT_EQ(rocr_.init_refs(), 0) << "every hsa_init paired with one hsa_shut_down";
      dlclose(rocr_.h);
      // Unloaded: the rest of this binary runs without an hsa-runtime.
      void* still = dlopen("libhsa-runtime64.so.1", RTLD_LAZY | RTLD_NOLOAD);
      EXPECT_EQ(still, nullptr) << "the fake hsa-runtime could not be unloaded";
      if (still) dlclose(still);
    }
  }

  conccl::kfd::Options options() const { return fixture_options(conccl::kfd::Options::Trap::auto_); }
  // The fake hsa-runtime at `path` loaded (rocr_), then the device opened;
  // nullptr (and a failure) if either fails.
  std::unique_ptr<conccl::kfd::KfdDevice> open_beside_rocr(const char* path) {
    rocr_.load(path);
    if (HasFatalFailure()) return nullptr;
    return open_device(options());
  }

  // A copy through the queue, with or without a recorded wake, waited for
  // with wait_done; the bytes checked.
  static void copy_and_wait(conccl::kfd::KfdDevice& dev, Queue& q, size_t bytes, bool wake) {
    Buffer src = *dev.alloc(-1, bytes, MemKind::host);
    Buffer dst = *dev.alloc(-1, bytes, MemKind::host);
    for (size_t i = 0; i < bytes; ++i) src.as<uint8_t>()[i] = static_cast<uint8_t>(i * 7 + 1);
    CommandBuffer cb = q.command_buffer();
    ASSERT_TRUE(cb.copy(dst.va, src.va, bytes).ok());
    if (wake) {
      ASSERT_TRUE(q.record_wake(cb).ok());
    }
    conccl::QueueSpan span;
    ASSERT_TRUE(q.submit(cb, Deadline::after_ms(10000), &span).ok());
    const conccl::Status st = q.wait_done(Deadline::after_ms(20000), span.end);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(std::memcmp(dst.host, src.host, bytes), 0);
    EXPECT_TRUE(dev.free(src).ok());
    EXPECT_TRUE(dev.free(dst).ok());
  }

  FakeRocr rocr_;
};

// The packets: ATOMIC add of 1 to the value, then (interrupt signals) the
// mailbox FENCE and TRAP of the event id, with GCR writeback first where the
// generation has it; the add alone without a mailbox; nothing on failure.
TEST_F(KfdRocrWake, WakePacketsAddThenFenceTheMailboxThenTrap) {
  using conccl::sdma::Key;
  using conccl::sdma::Pkt;
  for (conccl::sdma::Gen g : {conccl::sdma::Gen::v4_4_2, conccl::sdma::Gen::v6}) {
    CommandBuffer cb(conccl::Isa::sdma_gen(g));
    ASSERT_TRUE(conccl::kfd::record_wake_rocr(cb, 0x10008, 0x701, 0x20000).ok());
    const conccl::sdma::StreamDecode d = conccl::sdma::decode_stream(g, cb.dwords());
    ASSERT_TRUE(d.error.ok()) << d.error.to_string();
    const bool gcr = conccl::sdma::limits(g).has_gcr;
    ASSERT_EQ(d.packets.size(), gcr ? 4u : 3u);
    EXPECT_EQ(d.packets[0].pkt, Pkt::atomic_add64);
    EXPECT_EQ(d.packets[0].get(Key::addr), 0x10008u);
    EXPECT_EQ(d.packets[0].get(Key::value), 1u);
    if (gcr) {
      EXPECT_EQ(d.packets[1].pkt, Pkt::gcr_user);
    }
    const conccl::sdma::Packet& fence = d.packets[gcr ? 2 : 1];
    EXPECT_EQ(fence.pkt, Pkt::fence);
    EXPECT_EQ(fence.get(Key::addr), 0x20000u);
    EXPECT_EQ(fence.get(Key::value), 0x701u);
    EXPECT_EQ(d.packets.back().pkt, Pkt::trap);
    EXPECT_EQ(d.packets.back().get(Key::ctx), 0x701u);

    CommandBuffer plain(conccl::Isa::sdma_gen(g));
    ASSERT_TRUE(conccl::kfd::record_wake_rocr(plain, 0x10008, 0x701, 0).ok());
    EXPECT_EQ(plain.packet_count(), 1u) << "a signal without a mailbox: the add alone";

    CommandBuffer full(conccl::Isa::sdma_gen(g));
    ASSERT_TRUE(full.set_max_bytes(40).ok());  // room for the ATOMIC, not for the rest
    EXPECT_FALSE(conccl::kfd::record_wake_rocr(full, 0x10008, 0x701, 0x20000).ok());
    EXPECT_TRUE(full.empty()) << "all or nothing";
  }
}

TEST_F(KfdRocrWake, HostWaitsSleepOnRocrSignalsWhereHsaRuntimeHasItsOwnThunk) {
  auto dev = open_beside_rocr(FAKE_HSA_RUNTIME);
  ASSERT_NE(dev, nullptr);
  EXPECT_FALSE(conccl::kfd::internals(*dev)->trap_wakeups()) << "ROCr has its own thunk: no KFD events of ours";
  EXPECT_NE(note_with(dev->topology(), "libhsa-runtime64 in this process carries its own libhsakmt"), "");
  EXPECT_NE(note_with(dev->topology(),
                      "host waits sleep on ROCr interrupt signals (hsa-runtime in the process has its own libhsakmt)"),
            "");
  EXPECT_EQ(rocr_.init_calls(), 1) << "one hsa_init per device";
  EXPECT_EQ(rocr_.live_signals(), 0) << "signals come with queues";

  auto q = std::move(dev->create_queue(0, 0, conccl::QueueOptions{1 << 16})).value();
  EXPECT_EQ(rocr_.live_signals(), 1);
  conccl::Event* ev = q->wake_event();
  ASSERT_NE(ev, nullptr);
  const uint32_t id = ev->last_context();
  EXPECT_GE(id, 0x700u) << "the ROCr signal's event id";
  EXPECT_EQ(ev->count(), 0u);

  // The engine is held on a gate for a while, then copies: the host waits
  // with wait_done and must sleep in hsa_signal_wait_scacquire.
  Buffer gate = *dev->alloc(-1, 4096, MemKind::host);
  Buffer src = *dev->alloc(-1, 4 << 20, MemKind::host);
  Buffer dst = *dev->alloc(-1, 4 << 20, MemKind::host);
  for (size_t i = 0; i < (4u << 20); ++i) src.as<uint8_t>()[i] = static_cast<uint8_t>(i * 13 + 5);
  CommandBuffer cb = q->command_buffer();
  ASSERT_TRUE(conccl::SdmaPackets(cb).poll(gate.va, 1, ~0u, conccl::PollFunc::ge).ok());
  ASSERT_TRUE(cb.copy(dst.va, src.va, 4 << 20).ok());
  ASSERT_TRUE(q->record_wake(cb).ok());
  conccl::QueueSpan span;
  ASSERT_TRUE(q->submit(cb, Deadline::after_ms(10000), &span).ok());
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::atomic_ref<uint32_t>(*gate.as<uint32_t>()).store(1, std::memory_order_release);
  });
  const conccl::Status st = q->wait_done(Deadline::after_ms(20000), span.end);
  opener.join();
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(std::memcmp(dst.host, src.host, 4 << 20), 0);
  EXPECT_GE(rocr_.blocked_waits(), 1) << "wait_done slept in hsa_signal_wait_scacquire";

  fakekmt::Stats s = fakekmt::stats();
  EXPECT_EQ(s.atomics, 1) << "one ATOMIC add per recorded wake";
  EXPECT_EQ(ev->count(), 1u);
  EXPECT_EQ(std::count(s.traps.begin(), s.traps.end(), id), 1) << "the TRAP carried the signal's event id";
  EXPECT_EQ(static_cast<uint32_t>(rocr_.mailbox(id)), id) << "the mailbox got the event id";

  // Two more wakes; Event::wait sleeps for them.
  for (int i = 0; i < 2; ++i) {
    cb.clear();
    ASSERT_TRUE(q->record_wake(cb).ok());
    ASSERT_TRUE(q->submit(cb, Deadline::after_ms(10000)).ok());
  }
  const conccl::Status w = ev->wait(3, Deadline::after_ms(10000));
  ASSERT_TRUE(w.ok()) << w.to_string();
  EXPECT_EQ(ev->count(), 3u);
  EXPECT_EQ(fakekmt::stats().atomics, 3);
  const conccl::Status late = ev->wait(4, Deadline::after_ms(50));
  EXPECT_EQ(late.code(), Code::timeout);
  EXPECT_TRUE(contains(late.message(), "3 wake-ups, 4 awaited")) << late.message();
  EXPECT_TRUE(contains(late.message(), "event " + std::to_string(id))) << late.message();

  for (Buffer* b : {&gate, &src, &dst}) EXPECT_TRUE(dev->free(*b).ok());
  q.reset();
  EXPECT_EQ(rocr_.live_signals(), 0);
  EXPECT_EQ(rocr_.init_refs(), 1) << "the device keeps ROCr initialised";
  dev.reset();
  EXPECT_EQ(rocr_.shut_down_calls(), 1);
}

// A wake recorded but never submitted to this queue must not make every
// later wait sleep for it: once the engine is idle it is forgotten.
TEST_F(KfdRocrWake, AWakeNeverSubmittedIsForgotten) {
  auto dev = open_beside_rocr(FAKE_HSA_RUNTIME);
  ASSERT_NE(dev, nullptr);
  auto q = std::move(dev->create_queue(1, 0, conccl::QueueOptions{1 << 16})).value();
  ASSERT_NE(q->wake_event(), nullptr);
  CommandBuffer orphan = q->command_buffer();
  ASSERT_TRUE(q->record_wake(orphan).ok());  // never submitted
  copy_and_wait(*dev, *q, 4096, false);
  const int slept = rocr_.blocked_waits();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) copy_and_wait(*dev, *q, 4096, false);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, std::chrono::milliseconds(250)) << "later waits nap instead of sleeping out 100 ms slices";
  EXPECT_LE(rocr_.blocked_waits() - slept, 1);
  EXPECT_EQ(fakekmt::stats().atomics, 0);
  q.reset();
  dev.reset();
}

// The queues hold ROCr initialised after the device is gone, and the last
// signal's destruction lets hsa_shut_down run.
TEST_F(KfdRocrWake, QueuesOutlivingTheDeviceKeepRocrInitialised) {
  auto dev = open_beside_rocr(FAKE_HSA_RUNTIME);
  ASSERT_NE(dev, nullptr);
  auto q0 = std::move(dev->create_queue(0, 0, conccl::QueueOptions{4096})).value();
  auto q1 = std::move(dev->create_queue(2, 3, conccl::QueueOptions{4096})).value();
  EXPECT_EQ(rocr_.live_signals(), 2) << "one signal per queue";
  ASSERT_NE(q0->wake_event(), nullptr);
  ASSERT_NE(q1->wake_event(), nullptr);
  EXPECT_NE(q0->wake_event()->last_context(), q1->wake_event()->last_context());
  dev.reset();
  EXPECT_EQ(rocr_.init_refs(), 1);
  EXPECT_EQ(rocr_.shut_down_calls(), 0);
  q0.reset();
  EXPECT_EQ(rocr_.shut_down_calls(), 0);
  q1.reset();
  EXPECT_EQ(rocr_.live_signals(), 0);
  EXPECT_EQ(rocr_.shut_down_calls(), 1);
}

TEST_F(KfdRocrWake, EnvironmentTurnsItOff) {
  ::setenv("CONCCL_KFD_ROCR_WAKE", "0", 1);
  auto dev = open_beside_rocr(FAKE_HSA_RUNTIME);
  ASSERT_NE(dev, nullptr);
  EXPECT_NE(note_with(dev->topology(), "host waits poll with naps: waking through ROCr interrupt signals is off "
                                       "(CONCCL_KFD_ROCR_WAKE=0)"),
            "");
  EXPECT_EQ(rocr_.init_calls(), 0);
  auto q = std::move(dev->create_queue(0, 0, conccl::QueueOptions{})).value();
  EXPECT_EQ(q->wake_event(), nullptr);
  EXPECT_EQ(rocr_.live_signals(), 0);
  CommandBuffer cb = q->command_buffer();
  ASSERT_TRUE(q->record_wake(cb).ok());
  EXPECT_TRUE(cb.empty());
  copy_and_wait(*dev, *q, 1 << 20, true);
  EXPECT_EQ(rocr_.blocked_waits(), 0);
  q.reset();
  dev.reset();
}

TEST_F(KfdRocrWake, AMissingEntryPointMeansPollingWithANoteNamingIt) {
  auto dev = open_beside_rocr(FAKE_HSA_RUNTIME_WITHOUT_WAIT);
  ASSERT_NE(dev, nullptr);
  const std::string n = note_with(dev->topology(), "host waits poll with naps");
  EXPECT_TRUE(contains(n, "lacks hsa_signal_wait_scacquire")) << n;
  EXPECT_FALSE(conccl::kfd::internals(*dev)->trap_wakeups());
  EXPECT_EQ(rocr_.init_calls(), 0) << "an incomplete hsa-runtime is not initialised";
  auto q = std::move(dev->create_queue(0, 0, conccl::QueueOptions{})).value();
  EXPECT_EQ(q->wake_event(), nullptr);
  copy_and_wait(*dev, *q, 1 << 20, true);
  q.reset();
  dev.reset();
}

TEST_F(KfdRocrWake, WithoutHsaRuntimeWaitsPollAndSayWhy) {
  auto dev = open_device(options());
  ASSERT_NE(dev, nullptr);
  EXPECT_NE(note_with(dev->topology(), "host waits poll with naps: no libhsa-runtime64 in the process"), "");
  auto q = std::move(dev->create_queue(0, 0, conccl::QueueOptions{})).value();
  EXPECT_EQ(q->wake_event(), nullptr);
  q.reset();
  dev.reset();
}

// A GPU whose CPU link lacks 64-bit atomics cannot add to the signal: its
// queues poll, named in the note; other GPUs' queues sleep on signals.
TEST_F(KfdRocrWake, GpusWithoutHostAtomicsPoll) {
  const fs::path root = dri_ / "topology_no_atomics";
  ASSERT_TRUE(kfdfixture::mi300x_without_host_atomics(root));
  ASSERT_NO_FATAL_FAILURE(rocr_.load(FAKE_HSA_RUNTIME));
  conccl::kfd::Options o = options();
  o.sysfs_root = root.string();
  auto dev = open_device(o);
  ASSERT_NE(dev, nullptr);
  const std::string n = note_with(dev->topology(), "host waits sleep on ROCr interrupt signals");
  EXPECT_TRUE(contains(n, "gpu 0 polls with naps instead: its CPU link lacks 64-bit atomics (NO_ATOMICS_64)")) << n;
  auto q0 = std::move(dev->create_queue(0, 0, conccl::QueueOptions{})).value();
  auto q1 = std::move(dev->create_queue(1, 0, conccl::QueueOptions{})).value();
  EXPECT_EQ(q0->wake_event(), nullptr);
  EXPECT_NE(q1->wake_event(), nullptr);
  EXPECT_EQ(rocr_.live_signals(), 1);
  copy_and_wait(*dev, *q0, 4096, true);  // no ATOMIC recorded on gpu 0: submit would refuse it
  EXPECT_EQ(fakekmt::stats().atomics, 0);
  q0.reset();
  q1.reset();
  dev.reset();
}

}  // namespace
}  // namespace conccl
