// tests/backends/emu/fault_injection_test.cpp - stalls, dropped completions, delays,
// page faults, invalid packets, and recovering with reset_engine.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "conccl/sdma_packets.hpp"
#include "backends/emu/emu_test_util.hpp"

namespace conccl {
namespace {

using namespace conccl::test;  // with the sdma:: packet names (emu_test_util.hpp)

class EmuFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(dev_, make_small(2, 4));
    ASSERT_OK_AND_ASSIGN(q_, make_queue(*dev_, 0, 1, 64 << 10));
    ASSERT_OK_AND_ASSIGN(mem_, dev_->alloc(0, 1 << 20, MemKind::device));
    model_ = random_bytes(mem_.size, rng_);
    std::memcpy(mem_.host, model_.data(), mem_.size);
  }
  ::testing::AssertionResult memory_matches_model() { return bytes_equal(mem_.host, model_.data(), mem_.size); }
  // Records a write of fresh random dwords at mem_+off and applies it to the model.
  Status write(CommandBuffer& cb, uint64_t off, size_t dwords) {
    const std::vector<uint32_t> d = random_dwords(dwords, rng_);
    std::memcpy(model_.data() + off, d.data(), dwords * 4);
    return SdmaPackets(cb).write(mem_.va_at(off), d);
  }
  EngineStatus device_status() {
    Result<EngineStatus> es = dev_->engine_status(0, 1);
    EXPECT_TRUE(es.ok());
    return es.ok() ? *es : EngineStatus{};
  }
  emu::EngineStats stats() {
    Result<emu::EngineStats> st = dev_->engine_stats(0, 1);
    EXPECT_TRUE(st.ok());
    return st.ok() ? *st : emu::EngineStats{};
  }

  std::mt19937_64 rng_{0xFA17};
  std::unique_ptr<emu::EmuDevice> dev_;
  std::unique_ptr<Queue> q_;
  Buffer mem_;
  std::vector<uint8_t> model_;
};

TEST_F(EmuFaults, StallFreezesTheReadPointer) {
  ASSERT_OK(dev_->inject(0, 1, emu::Injection{.stall = true}));
  EXPECT_EQ(device_status().state, EngineStatus::State::stalled);
  CommandBuffer cb = q_->command_buffer();
  ASSERT_OK(write(cb, 64, 6));
  ASSERT_OK(cb.copy(mem_.va_at(4096), mem_.va_at(8192), 1000));
  std::memcpy(model_.data() + 4096, model_.data() + 8192, 1000);
  QueueSpan end_span;
  ASSERT_OK(q_->submit(cb, long_deadline(), &end_span));
  const uint64_t end = end_span.end;

  Status st = q_->wait_done(Deadline::after_ms(40), end);
  ASSERT_EQ(st.code(), Code::timeout);
  EXPECT_TRUE(contains(st.message(), "stalled")) << st.message();
  EXPECT_TRUE(contains(st.message(), "pending packets")) << st.message();
  EXPECT_TRUE(contains(st.message(), "write dst=" + hex(mem_.va_at(64)))) << st.message();
  EXPECT_TRUE(contains(st.message(), "copy")) << st.message();
  EXPECT_EQ(q_->completed(), 0u);
  EXPECT_EQ(q_->engine_status().state, EngineStatus::State::stalled);
  EXPECT_EQ(stats().packets, 0u);
  // Nothing ran: memory still holds the old contents where the packets write.
  EXPECT_NE(std::memcmp(static_cast<uint8_t*>(mem_.host) + 64, model_.data() + 64, 24), 0);

  ASSERT_OK(dev_->inject(0, 1, emu::Injection{}));
  ASSERT_OK(q_->wait_done(long_deadline(), end));
  EXPECT_TRUE(memory_matches_model());
  EXPECT_EQ(stats().packets, 2u + frame_packets(*q_));
  EXPECT_NE(device_status().state, EngineStatus::State::stalled);
}

TEST_F(EmuFaults, DroppedCompletionsAreSkippedAndCounted) {
  Buffer sig;
  ASSERT_OK_AND_ASSIGN(sig, dev_->alloc(-1, 4096, MemKind::host));
  ASSERT_OK(dev_->inject(0, 1, emu::Injection{.drop_completions = 3}));
  CommandBuffer cb = q_->command_buffer();
  ASSERT_OK(SdmaPackets(cb).fence(sig.va_at(0), 0x11));                 // dropped
  ASSERT_OK(write(cb, 0, 4));                               // not a completion: runs
  ASSERT_OK(SdmaPackets(cb).atomic_add64(sig.va_at(8), 5));              // dropped
  const FieldValue swap[] = {{Key::op, 39}, {Key::addr, sig.va_at(16)}, {Key::value, 9}};
  ASSERT_OK(SdmaPackets(cb).packet(Pkt::atomic, swap));                  // dropped
  ASSERT_OK(SdmaPackets(cb).fence(sig.va_at(24), 0x44));                 // runs: the budget is spent
  ASSERT_OK(SdmaPackets(cb).atomic_add64(sig.va_at(32), -6));            // runs
  ASSERT_OK(run(*q_, cb));
  EXPECT_EQ(q_->completed(), q_->submitted());
  const auto* s = sig.as<const uint64_t>();
  EXPECT_EQ(s[0], 0u);
  EXPECT_EQ(s[1], 0u);
  EXPECT_EQ(s[2], 0u);
  EXPECT_EQ(s[3], 0x44u);
  EXPECT_EQ(s[4], uint64_t(-6));
  EXPECT_TRUE(memory_matches_model());
  emu::EngineStats st = stats();
  EXPECT_EQ(st.dropped_completions, 3u);
  EXPECT_EQ(st.packets, 6u + frame_packets(*q_));
  // fence64 is two FENCEs: dropping one leaves a torn 64-bit value.
  CommandBuffer again = q_->command_buffer();
  ASSERT_OK(dev_->inject(0, 1, emu::Injection{.drop_completions = 1}));
  ASSERT_OK(SdmaPackets(again).fence64(sig.va_at(40), 0x0000000700000009ull));  // low half dropped, high half lands
  ASSERT_OK(run(*q_, again));
  EXPECT_EQ(s[5], 0x0000000700000000ull);
  EXPECT_EQ(stats().dropped_completions, 4u);
}

TEST_F(EmuFaults, DelaySlowsEveryPacket) {
  constexpr int kPackets = 20;
  constexpr auto kDelay = std::chrono::microseconds(1500);
  ASSERT_OK(dev_->inject(0, 1, emu::Injection{.delay = kDelay}));
  CommandBuffer cb = q_->command_buffer();
  for (int i = 0; i < kPackets; ++i) ASSERT_OK(write(cb, 256 * i, 3));
  const auto t0 = Clock::now();
  ASSERT_OK(run(*q_, cb));
  const auto elapsed = Clock::now() - t0;
  EXPECT_GE(elapsed, kPackets * kDelay);
  EXPECT_TRUE(memory_matches_model());
  ASSERT_OK(dev_->inject(0, 1, emu::Injection{}));
}

TEST_F(EmuFaults, PageFaultOnUnmappedAddressesHaltsTheEngine) {
  struct Case {
    const char* what;
    uint64_t va;
  };
  const uint64_t gpu_mem = dev_->topology().gpus[0].memory_bytes;
  const Case cases[] = {
      {"past the end of gpu 0's memory", emu::kGpuVaBase + gpu_mem},
      {"a GPU the node does not have", emu::kGpuVaBase + 2 * emu::kGpuVaStride},
      {"below every window", 0x1000},
      {"past the end of host memory", emu::kHostVaBase + (1ull << 40) - 4096},
  };
  uint64_t faults = 0;
  for (const Case& c : cases) {
    for (bool as_src : {false, true}) {
      SCOPED_TRACE(std::string(c.what) + (as_src ? " (copy source)" : " (write destination)"));
      CommandBuffer cb = q_->command_buffer();
      ASSERT_OK(write(cb, 128, 2));  // runs before the fault
      const uint64_t before = q_->submitted();
      const uint64_t fault_at = before + frame_head_bytes(*q_) + cb.size_bytes();
      if (as_src)
        ASSERT_OK(cb.copy(mem_.va_at(512), c.va, 64));
      else
        ASSERT_OK(SdmaPackets(cb).write(c.va, std::vector<uint32_t>{1, 2, 3}));
      CommandBuffer later = q_->command_buffer();
      ASSERT_OK(SdmaPackets(later).write(mem_.va_at(1024), random_dwords(4, rng_)));  // never runs
      ASSERT_OK(cb.raw(later.dwords()));
      Status st = run(*q_, cb);
      ASSERT_EQ(st.code(), Code::device_fault) << st.to_string();
      EXPECT_TRUE(contains(st.message(), "page fault")) << st.message();
      EXPECT_TRUE(contains(st.message(), hex(c.va))) << st.message();
      EXPECT_TRUE(contains(st.message(), as_src ? "copy source" : "write destination")) << st.message();
      EXPECT_TRUE(contains(st.message(), as_src ? "(packet: copy" : "(packet: write")) << st.message();
      const EngineStatus es = device_status();
      EXPECT_EQ(es.state, EngineStatus::State::halted);
      EXPECT_EQ(es.fault_pos, fault_at);
      EXPECT_TRUE(contains(es.fault, "at rptr " + hex(fault_at))) << es.fault;
      EXPECT_TRUE(contains(es.fault, "queue " + std::to_string(q_->id()))) << es.fault;
      EXPECT_EQ(dynamic_cast<SdmaQueue&>(*q_).rptr(), fault_at) << "rptr stops at the faulting packet";
      EXPECT_EQ(q_->completed(), before) << "the faulting submission never completes";
      EXPECT_TRUE(memory_matches_model()) << "only the packet before the fault may have run";
      ++faults;

      ASSERT_OK(dev_->reset_engine(0, 1));
      EXPECT_EQ(device_status().state, EngineStatus::State::idle);
      EXPECT_EQ(q_->completed(), q_->submitted()) << "reset drops the faulting queue's packets";
    }
  }
  // The queue works after the resets.
  CommandBuffer cb = q_->command_buffer();
  ASSERT_OK(write(cb, 2048, 8));
  ASSERT_OK(run(*q_, cb));
  EXPECT_TRUE(memory_matches_model());
  EXPECT_EQ(faults, 8u);
}

TEST_F(EmuFaults, HostPointerUsedAsGpuAddressFaults) {
  std::vector<uint8_t> host = random_bytes(4096, rng_);
  const std::vector<uint8_t> host_before = host;
  const uint64_t hp = reinterpret_cast<uintptr_t>(host.data());
  ASSERT_EQ(dev_->host_pointer(hp, 64), nullptr) << "a host pointer must not be a valid GPU address";

  CommandBuffer cb = q_->command_buffer();
  ASSERT_OK(SdmaPackets(cb).write(hp, std::vector<uint32_t>{0xDEAD, 0xBEEF}));
  Status st = run(*q_, cb);
  ASSERT_EQ(st.code(), Code::device_fault) << st.to_string();
  EXPECT_TRUE(contains(st.message(), hex(hp))) << st.message();
  EXPECT_TRUE(contains(st.message(), "outside every mapping")) << st.message();
  ASSERT_OK(dev_->reset_engine(0, 1));

  // ...as a copy destination and as a fill target too.
  cb.clear();
  ASSERT_OK(cb.copy(hp, mem_.va, 4096));
  st = run(*q_, cb);
  ASSERT_EQ(st.code(), Code::device_fault) << st.to_string();
  EXPECT_TRUE(contains(st.message(), "copy destination")) << st.message();
  ASSERT_OK(dev_->reset_engine(0, 1));
  cb.clear();
  ASSERT_OK(cb.fill(hp & ~uint64_t(3), 0x5A5A5A5A, 256));
  st = run(*q_, cb);
  ASSERT_EQ(st.code(), Code::device_fault) << st.to_string();
  ASSERT_OK(dev_->reset_engine(0, 1));
  EXPECT_EQ(host, host_before) << "the engine wrote host memory through a raw pointer";
  EXPECT_TRUE(memory_matches_model());
}

TEST_F(EmuFaults, InvalidPacketsAreRefusedByRaw) {
  CommandBuffer cb = q_->command_buffer();
  const std::vector<uint32_t> junk = {0x000000FF, 1, 2, 3};
  Status st = cb.raw(junk);
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_TRUE(contains(st.message(), "dword 0")) << st.message();
  EXPECT_TRUE(cb.empty());
  // Nothing was submitted, so nothing halts.
  ASSERT_OK(q_->submit(cb, long_deadline()));
  EXPECT_EQ(q_->submitted(), 0u);
}

// Corrupting a packet in the ring itself (after submit, while the engine is
// stalled): the engine halts at that packet with the decoder's reason.
TEST_F(EmuFaults, CorruptRingHaltsWithADecodedReason) {
  ASSERT_OK(dev_->inject(0, 1, emu::Injection{.stall = true}));
  CommandBuffer cb = q_->command_buffer();
  ASSERT_OK(write(cb, 0, 5));
  const uint64_t bad_at = frame_head_bytes(*q_) + cb.size_bytes();
  ASSERT_OK(SdmaPackets(cb).nop(3));  // to be overwritten with an unknown opcode
  CommandBuffer tail = q_->command_buffer();
  ASSERT_OK(SdmaPackets(tail).write(mem_.va_at(4096), random_dwords(4, rng_)));  // must never run
  ASSERT_OK(cb.raw(tail.dwords()));
  ASSERT_OK(q_->submit(cb, long_deadline()));
  uint32_t* ring = find_ring(*dev_, *q_, frame_head_bytes(*q_), cb.dwords());
  ASSERT_NE(ring, nullptr) << "could not find the queue's ring in host memory";
  ring[bad_at / 4] = 0x0000003Eu;  // opcode 62: no such packet
  ASSERT_OK(dev_->inject(0, 1, emu::Injection{}));

  Status st = q_->wait_done(long_deadline());
  ASSERT_EQ(st.code(), Code::device_fault) << st.to_string();
  EXPECT_TRUE(contains(st.message(), "invalid packet")) << st.message();
  EXPECT_TRUE(contains(st.message(), "opcode 62")) << st.message();
  EXPECT_TRUE(contains(st.message(), "at rptr " + hex(bad_at))) << st.message();
  EXPECT_EQ(dynamic_cast<SdmaQueue&>(*q_).rptr(), bad_at);
  EXPECT_EQ(q_->completed(), 0u) << "the halted submission never completes";
  EXPECT_EQ(device_status().fault_pos, bad_at);
  // The diagnosis decodes what is pending and flags the bad dword.
  const std::string diag = q_->diagnose();
  EXPECT_TRUE(contains(diag, "@" + hex(bad_at) + ": <")) << diag;
  EXPECT_TRUE(memory_matches_model()) << "the packet after the bad one ran";

  ASSERT_OK(dev_->reset_engine(0, 1));
  EXPECT_EQ(q_->completed(), q_->submitted());
  cb.clear();
  ASSERT_OK(write(cb, 8192, 16));
  ASSERT_OK(run(*q_, cb));
  EXPECT_TRUE(memory_matches_model());
}

TEST_F(EmuFaults, ResetKeepsTheOtherQueuesOfTheEngine) {
  std::unique_ptr<Queue> other;
  ASSERT_OK_AND_ASSIGN(other, make_queue(*dev_, 0, 1, 64 << 10));
  CommandBuffer bad = q_->command_buffer();
  ASSERT_OK(bad.copy(mem_.va, emu::kGpuVaBase + 3 * emu::kGpuVaStride, 64));
  ASSERT_OK(q_->submit(bad, long_deadline()));
  ASSERT_EQ(q_->wait_done(long_deadline()).code(), Code::device_fault);

  // While halted the engine runs nothing, for any of its queues.
  CommandBuffer good = other->command_buffer();
  ASSERT_OK(write(good, 300, 7));
  QueueSpan end_span;
  ASSERT_OK(other->submit(good, long_deadline(), &end_span));
  const uint64_t end = end_span.end;
  Status st = other->wait_done(long_deadline(), end);
  EXPECT_EQ(st.code(), Code::device_fault) << st.to_string();
  EXPECT_EQ(other->completed(), 0u);
  EXPECT_EQ(other->engine_status().state, EngineStatus::State::halted);

  // Reset: the faulting queue's work is dropped, the other queue's runs.
  ASSERT_OK(dev_->reset_engine(0, 1));
  ASSERT_OK(other->wait_done(long_deadline(), end));
  EXPECT_TRUE(memory_matches_model());
  EXPECT_TRUE(device_status().fault.empty());
  // Resetting a healthy engine is harmless.
  ASSERT_OK(dev_->reset_engine(0, 1));
  ASSERT_OK(dev_->reset_engine(1, 3));
}

TEST_F(EmuFaults, InjectionApiChecksItsArguments) {
  EXPECT_EQ(dev_->inject(2, 0, {}).code(), Code::invalid_argument);
  EXPECT_EQ(dev_->inject(0, 4, {}).code(), Code::invalid_argument);
  EXPECT_EQ(dev_->inject(-1, 0, {}).code(), Code::invalid_argument);
  EXPECT_EQ(dev_->engine_status(0, -1).status().code(), Code::invalid_argument);
  EXPECT_EQ(dev_->engine_stats(5, 0).status().code(), Code::invalid_argument);
  EXPECT_EQ(dev_->reset_engine(0, 99).code(), Code::invalid_argument);
  // An engine with no queue yet reports idle.
  Result<EngineStatus> es = dev_->engine_status(1, 3);
  ASSERT_TRUE(es.ok());
  EXPECT_EQ(es->state, EngineStatus::State::idle);
  EXPECT_EQ(es->detail(), "idle");
}

}  // namespace
}  // namespace conccl
