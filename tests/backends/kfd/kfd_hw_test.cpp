// tests/backends/kfd/kfd_hw_test.cpp - the KFD backend on real AMD GPUs.
//
// Runs fully where /dev/kfd exists (an AMD GPU with the amdgpu driver, a
// build with libhsakmt, a user in the render and video groups); skips with
// the reason everywhere else. Every copy is verified byte for byte against a
// random pattern; every wait has a deadline and reports the queue's state
// when it passes. See docs/hardware.md for what to expect on each machine.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

#include "conccl/sdma_packets.hpp"
#include "backends/kfd/kfd_policy.hpp"
#include "conccl/queue.hpp"

namespace conccl {
namespace {

constexpr size_t kRing = 64 * 1024;

class KfdHw : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(conccl::kfd::kDefaultDevicePath))
      GTEST_SKIP() << "no /dev/kfd: this machine has no AMD GPU driven by amdgpu/KFD; these tests run on AMD "
                      "hardware (docs/hardware.md)";
    if (!conccl::kfd::built_with_libhsakmt())
      GTEST_SKIP() << "/dev/kfd exists but ConCCL was built without libhsakmt: install libhsakmt-dev or ROCm and "
                      "rebuild to run the hardware tests";
    conccl::Result<std::unique_ptr<conccl::kfd::KfdDevice>> d = conccl::kfd::open();
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    dev_ = std::move(d).value();
    host_sig_ = alloc(-1, 4096, MemKind::host);
  }
  void TearDown() override {
    if (dev_ && host_sig_.size) {
      EXPECT_TRUE(dev_->free(host_sig_).ok());
    }
  }

  Buffer alloc(int gpu, size_t bytes, MemKind kind) {
    conccl::Result<Buffer> b = dev_->alloc(gpu, bytes, kind);
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    return b.ok() ? *b : Buffer{};
  }

  std::unique_ptr<Queue> queue(int gpu, int engine) {
    conccl::Result<std::unique_ptr<Queue>> q = dev_->create_queue(gpu, engine, conccl::QueueOptions{kRing});
    EXPECT_TRUE(q.ok()) << q.status().to_string();
    return q.ok() ? std::move(q).value() : nullptr;
  }

  uint32_t signal_value() const {
    return std::atomic_ref<uint32_t>(*host_sig_.as<uint32_t>()).load(std::memory_order_acquire);
  }

  // Appends FENCE(signal, seq) and the wake-up, submits, and sleeps on the
  // queue's TRAP event until the signal arrives or 10 s pass.
  Status run(Queue& q, CommandBuffer& cb) {
    const uint32_t seq = ++seq_;
    CONCCL_RETURN_IF_ERROR(conccl::SdmaPackets(cb).fence(host_sig_.va, seq));
    CONCCL_RETURN_IF_ERROR(q.record_wake(cb));
    const Deadline deadline = Deadline::after_ms(10000);
    CONCCL_RETURN_IF_ERROR(q.submit(cb, deadline));
    while (signal_value() < seq) {
      if (deadline.expired())
        return conccl::error(Code::timeout, "signal " + std::to_string(signal_value()) + " < " + std::to_string(seq) +
                                                " after 10 s. " + q.diagnose());
      const uint64_t c = q.wake_event()->count();
      if (signal_value() >= seq) break;
      (void)q.wake_event()->wait(c + 1, Deadline::after_ms(100));
      if (q.engine_status().state == conccl::EngineStatus::State::halted)
        return conccl::error(Code::device_fault, q.diagnose());
    }
    return Status();
  }

  // One SDMA copy on `q`, run to its end (run()).
  Status copy(Queue& q, uint64_t dst_va, uint64_t src_va, size_t bytes) {
    CommandBuffer cb = q.command_buffer();
    CONCCL_RETURN_IF_ERROR(cb.copy(dst_va, src_va, bytes));
    return run(q, cb);
  }

  static std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> v(n);
    for (uint8_t& b : v) b = static_cast<uint8_t>(rng() | 1);  // never zero
    return v;
  }

  // Writes bytes into any buffer: directly when CPU-visible, else through a
  // host staging buffer and an SDMA copy on `q`.
  Status put(Queue& q, const Buffer& dst, const std::vector<uint8_t>& data) {
    if (dst.host) {
      std::memcpy(dst.host, data.data(), data.size());
      return Status();
    }
    Buffer stage = alloc(-1, data.size(), MemKind::host);
    std::memcpy(stage.host, data.data(), data.size());
    Status st = copy(q, dst.va, stage.va, data.size());
    (void)dev_->free(stage);
    return st;
  }
  Status get(Queue& q, const Buffer& src, std::vector<uint8_t>& out) {
    if (src.host) {
      std::memcpy(out.data(), src.host, out.size());
      return Status();
    }
    Buffer stage = alloc(-1, out.size(), MemKind::host);
    Status st = copy(q, stage.va, src.va, out.size());
    if (st.ok()) std::memcpy(out.data(), stage.host, out.size());
    (void)dev_->free(stage);
    return st;
  }

  static size_t first_mismatch(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i]) return i;
    return a.size();
  }

  std::unique_ptr<conccl::kfd::KfdDevice> dev_;
  Buffer host_sig_;
  uint32_t seq_ = 0;
};

TEST_F(KfdHw, TopologyAndQueueMode) {
  const conccl::Topology& t = dev_->topology();
  std::printf("%s", conccl::topology_table(t).c_str());
  ASSERT_FALSE(t.gpus.empty());
  ASSERT_FALSE(t.notes.empty());
  EXPECT_EQ(t.notes[0].rfind("queue mode: ", 0), 0u) << t.notes[0];
  const conccl::kfd::KfdTopology& kt = conccl::kfd::internals(*dev_)->kfd_topology();
  for (const conccl::kfd::GpuNode& g : kt.gpus) {
    EXPECT_GE(g.thunk_node, 0);
    EXPECT_GT(g.engine_count(), 0);
    EXPECT_EQ(t.gpus[static_cast<size_t>(g.index)].engines.size(), static_cast<size_t>(g.engine_count()));
  }
}

// One queue on every engine of every GPU: create, run a FENCE, destroy.
TEST_F(KfdHw, QueueOnEveryEngine) {
  const conccl::Topology& t = dev_->topology();
  for (const conccl::GpuInfo& g : t.gpus) {
    for (const conccl::EngineInfo& e : g.engines) {
      SCOPED_TRACE("gpu " + std::to_string(g.index) + " engine " + std::to_string(e.id));
      std::unique_ptr<Queue> q = queue(g.index, e.id);
      ASSERT_NE(q, nullptr);
      EXPECT_EQ(q->isa(), g.isa);
      CommandBuffer cb = q->command_buffer();
      ASSERT_TRUE(conccl::SdmaPackets(cb).nop().ok());
      Status st = run(*q, cb);
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_EQ(q->completed(), q->submitted());
    }
  }
}

// Every engine of every GPU copies to its own GPU and to every peer it has a
// link to, and to and from host memory; every byte is checked.
TEST_F(KfdHw, CopyOnEveryEngineToEveryPeer) {
  const conccl::Topology& t = dev_->topology();
  constexpr size_t kBytes = (1u << 20) + 36;  // not a multiple of any packet limit
  uint32_t seed = 1;
  for (const conccl::GpuInfo& s : t.gpus) {
    Buffer src = alloc(s.index, kBytes, MemKind::device);
    Buffer host = alloc(-1, kBytes, MemKind::host);
    for (const conccl::EngineInfo& e : s.engines) {
      std::unique_ptr<Queue> q = queue(s.index, e.id);
      ASSERT_NE(q, nullptr);
      // host -> VRAM on this engine
      {
        SCOPED_TRACE("host -> gpu " + std::to_string(s.index) + " on engine " + std::to_string(e.id));
        const std::vector<uint8_t> want = pattern(kBytes, seed++);
        std::memcpy(host.host, want.data(), kBytes);
        Status st = copy(*q, src.va, host.va, kBytes);
        ASSERT_TRUE(st.ok()) << st.to_string();
        std::vector<uint8_t> got(kBytes);
        ASSERT_TRUE(get(*q, src, got).ok());
        ASSERT_EQ(first_mismatch(want, got), kBytes);
      }
      // VRAM -> VRAM (self and peers) and VRAM -> host
      std::vector<int> dsts = {s.index};
      for (const conccl::LinkInfo& l : s.links) dsts.push_back(l.peer);
      for (int d : dsts) {
        SCOPED_TRACE("gpu " + std::to_string(s.index) + " -> gpu " + std::to_string(d) + " on engine " +
                     std::to_string(e.id));
        const std::vector<uint8_t> want = pattern(kBytes, seed++);
        ASSERT_TRUE(put(*q, src, want).ok());
        Buffer dst = alloc(d, kBytes, MemKind::device);
        Status st = copy(*q, dst.va, src.va, kBytes);
        ASSERT_TRUE(st.ok()) << st.to_string();
        std::vector<uint8_t> got(kBytes);
        ASSERT_TRUE(get(*q, dst, got).ok());
        const size_t bad = first_mismatch(want, got);
        EXPECT_EQ(bad, kBytes) << "first wrong byte at " << bad;
        ASSERT_TRUE(dev_->free(dst).ok());
      }
      {
        SCOPED_TRACE("gpu " + std::to_string(s.index) + " -> host on engine " + std::to_string(e.id));
        const std::vector<uint8_t> want = pattern(kBytes, seed++);
        ASSERT_TRUE(put(*q, src, want).ok());
        std::memset(host.host, 0, kBytes);
        Status st = copy(*q, host.va, src.va, kBytes);
        ASSERT_TRUE(st.ok()) << st.to_string();
        ASSERT_EQ(std::memcmp(host.host, want.data(), kBytes), 0);
      }
    }
    ASSERT_TRUE(dev_->free(src).ok());
    ASSERT_TRUE(dev_->free(host).ok());
  }
}

// The engine raises TRAP only after a gate opens; the host sleeps in
// hsaKmtWaitOnEvent until then.
TEST_F(KfdHw, TrapWakesTheHost) {
  std::unique_ptr<Queue> q = queue(0, 0);
  ASSERT_NE(q, nullptr);
  Buffer gate = alloc(-1, 4096, MemKind::host);
  auto* g = gate.as<uint32_t>();
  std::atomic_ref<uint32_t>(*g).store(0);
  CommandBuffer cb = q->command_buffer();
  ASSERT_TRUE(conccl::SdmaPackets(cb).poll(gate.va, 1, 0xFFFFFFFF, conccl::PollFunc::eq).ok());
  ASSERT_TRUE(conccl::SdmaPackets(cb).fence(host_sig_.va, 77).ok());
  ASSERT_TRUE(q->record_wake(cb).ok());
  ASSERT_TRUE(q->submit(cb, Deadline::after_ms(1000)).ok());
  const uint64_t before = q->wake_event()->count();
  // Gate closed: no TRAP yet.
  Status st = q->wake_event()->wait(before + 1, Deadline::after_ms(300));
  EXPECT_EQ(st.code(), Code::timeout) << st.to_string();
  EXPECT_NE(signal_value(), 77u);
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic_ref<uint32_t>(*g).store(1, std::memory_order_release);
  st = q->wake_event()->wait(before + 1, Deadline::after_ms(5000));
  ASSERT_TRUE(st.ok()) << st.to_string() << "\n" << q->diagnose();
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
  std::printf("gate -> TRAP wake-up: %lld us\n", static_cast<long long>(us.count()));
  EXPECT_EQ(signal_value(), 77u);
  EXPECT_TRUE(q->wait_done(Deadline::after_ms(1000)).ok());
  ASSERT_TRUE(dev_->free(gate).ok());
}

TEST_F(KfdHw, RegisteredAndImportedMemory) {
  constexpr size_t kBytes = 3 * 4096 + 100;
  std::vector<uint8_t> storage(kBytes + 8192);
  uint8_t* p = storage.data() + 100;  // deliberately not page-aligned
  conccl::Result<Buffer> reg = dev_->register_host(p, kBytes);
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  EXPECT_EQ(reg->host, p);
  std::unique_ptr<Queue> q = queue(0, 0);
  ASSERT_NE(q, nullptr);
  Buffer vram = alloc(0, kBytes, MemKind::device);
  const std::vector<uint8_t> want = pattern(kBytes, 99);
  ASSERT_TRUE(put(*q, vram, want).ok());
  Status st = copy(*q, reg->va, vram.va, kBytes);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(std::memcmp(p, want.data(), kBytes), 0);
  ASSERT_TRUE(dev_->free(*reg).ok());

  // import(): memory libhsakmt allocated (here: ours) is found by pointer.
  if (vram.host) {
    conccl::Result<Buffer> imp = dev_->import(static_cast<uint8_t*>(vram.host) + 64, 128);
    ASSERT_TRUE(imp.ok()) << imp.status().to_string();
    EXPECT_EQ(imp->va, vram.va + 64);
    EXPECT_EQ(imp->kind, MemKind::device);
    EXPECT_EQ(imp->gpu, 0);
    ASSERT_TRUE(dev_->free(*imp).ok());  // forgets it; vram stays valid
  }
  int on_stack = 0;
  conccl::Result<Buffer> unknown = dev_->import(&on_stack, sizeof on_stack);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), Code::not_found);
  ASSERT_TRUE(dev_->free(vram).ok());
}

TEST_F(KfdHw, BadArguments) {
  const conccl::GpuInfo& g = dev_->topology().gpus[0];
  conccl::Result<std::unique_ptr<Queue>> q =
      dev_->create_queue(0, static_cast<int>(g.engines.size()), conccl::QueueOptions{kRing});
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), Code::invalid_argument);
  EXPECT_NE(q.status().message().find("out of range"), std::string::npos);
  q = dev_->create_queue(0, 0, conccl::QueueOptions{3000});
  EXPECT_EQ(q.status().code(), Code::invalid_argument);
  q = dev_->create_queue(dev_->gpu_count(), 0, conccl::QueueOptions{kRing});
  EXPECT_EQ(q.status().code(), Code::invalid_argument);
  EXPECT_EQ(dev_->alloc(0, 0, MemKind::device).status().code(), Code::invalid_argument);
  EXPECT_EQ(dev_->free(Buffer{}).code(), Code::invalid_argument);
}

// Takes engine 0's queue slots until KFD says -ENOMEM (briefly: other
// processes on the machine cannot get a queue on that engine meanwhile),
// checks the error, then gives them back and creates one again.
TEST_F(KfdHw, OutOfQueuesIsResourceExhausted) {
  std::vector<std::unique_ptr<Queue>> held;
  Status last;
  for (int i = 0; i < 64; ++i) {
    conccl::Result<std::unique_ptr<Queue>> q = dev_->create_queue(0, 0, conccl::QueueOptions{4096});
    if (!q.ok()) {
      last = q.status();
      break;
    }
    held.push_back(std::move(q).value());
  }
  std::printf("created %zu queues on gpu 0 engine 0 before: %s\n", held.size(), last.to_string().c_str());
  ASSERT_FALSE(last.ok()) << "64 queues on one engine without running out";
  EXPECT_EQ(last.code(), Code::resource_exhausted) << last.to_string();
  EXPECT_NE(last.message().find("no free SDMA queue slot"), std::string::npos) << last.to_string();
  held.clear();
  EXPECT_NE(queue(0, 0), nullptr);
}

}  // namespace
}  // namespace conccl
