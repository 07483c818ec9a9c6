// tests/queue/held_submit_test.cpp - two-step publication (Queue::submit_held
// and release, used by gated collective calls) on both ring protocols, the
// SDMA ring (emulated MI300X) and the GPFIFO (emulated H200): held work is
// written but not run until released; a later submit publishes it first, in
// ring order; part of it can be released; waiting for it releases it; held
// work that fills the ring is published rather than deadlocking. Random data,
// every byte checked.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

#include "conccl/emu.hpp"
#include "conccl/signal.hpp"
#include "backends/emu/emu_test_util.hpp"

namespace conccl {
namespace {

using namespace conccl::test;

struct Engine {
  const char* preset;
  int engine;
};

class HeldSubmit : public ::testing::TestWithParam<Engine> {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(dev_, emu::create(options(GetParam().preset, 1, 0, "", 64u << 20)));
  }
  std::unique_ptr<Queue> queue(size_t ring = 64 << 10) {
    Result<std::unique_ptr<Queue>> q = make_queue(*dev_, 0, GetParam().engine, ring);
    EXPECT_TRUE(q.ok()) << q.status().to_string();
    return q.ok() ? std::move(q).value() : nullptr;
  }
  Buffer random_buffer(size_t bytes) {
    Result<Buffer> b = dev_->alloc(0, bytes, MemKind::device);
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    if (b.ok()) fill_random(b->host, bytes, rng_);
    return b.ok() ? *b : Buffer{};
  }
  // Long enough for an engine that could see the work to have run it.
  static void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }

  std::unique_ptr<emu::EmuDevice> dev_;
  std::mt19937_64 rng_{0x4E1D};
};

TEST_P(HeldSubmit, HeldWorkRunsOnlyOnceReleased) {
  auto q = queue();
  ASSERT_NE(q, nullptr);
  constexpr size_t kBytes = 8192 + 24;
  Buffer src = random_buffer(kBytes), dst = random_buffer(kBytes);
  const std::vector<uint8_t> dst_before(dst.as<uint8_t>(), dst.as<uint8_t>() + kBytes);
  ASSERT_OK_AND_ASSIGN(Signal s, Signal::create(*dev_));
  CommandBuffer cb = q->command_buffer();
  ASSERT_OK(cb.copy(dst.va, src.va, kBytes));
  ASSERT_OK(s.signal_add(cb, 1));
  QueueSpan span;
  ASSERT_OK(q->submit_held(cb, long_deadline(), &span));
  EXPECT_EQ(span.end, q->submitted()) << "held work has its ticket";
  EXPECT_EQ(q->held(), span.end);
  settle();
  EXPECT_EQ(s.value(), 0u) << "the engine ran held work";
  EXPECT_TRUE(bytes_equal(dst.host, dst_before.data(), kBytes));
  EXPECT_TRUE(contains(q->diagnose(), "held")) << q->diagnose();
  q->release(span.end);
  EXPECT_EQ(q->held(), 0u);
  ASSERT_OK(s.wait(1, long_deadline()));
  EXPECT_TRUE(bytes_equal(dst.host, src.host, kBytes));
  q->release(span.end);  // again: nothing held, nothing happens
  ASSERT_OK(q->wait_done(long_deadline()));
  EXPECT_EQ(s.value(), 1u);
}

TEST_P(HeldSubmit, PartOfTheHeldWorkIsReleasedInOrder) {
  auto q = queue();
  ASSERT_NE(q, nullptr);
  constexpr size_t kBytes = 4096 + 12;
  Buffer src = random_buffer(kBytes), mid = random_buffer(kBytes), dst = random_buffer(kBytes);
  const std::vector<uint8_t> dst_before(dst.as<uint8_t>(), dst.as<uint8_t>() + kBytes);
  ASSERT_OK_AND_ASSIGN(Signal s, Signal::create(*dev_));
  CommandBuffer a = q->command_buffer(), b = q->command_buffer();
  ASSERT_OK(a.copy(mid.va, src.va, kBytes));
  ASSERT_OK(s.signal_add(a, 1));
  ASSERT_OK(b.copy(dst.va, mid.va, kBytes));  // right only if a ran first
  ASSERT_OK(s.signal_add(b, 1));
  QueueSpan sa, sb;
  ASSERT_OK(q->submit_held(a, long_deadline(), &sa));
  ASSERT_OK(q->submit_held(b, long_deadline(), &sb));
  EXPECT_LT(sa.end, sb.end);
  EXPECT_EQ(q->held(), sb.end);
  q->release(sa.end);
  ASSERT_OK(s.wait(1, long_deadline()));
  EXPECT_TRUE(bytes_equal(mid.host, src.host, kBytes));
  settle();
  EXPECT_EQ(s.value(), 1u) << "the second held submission ran with the first";
  EXPECT_TRUE(bytes_equal(dst.host, dst_before.data(), kBytes));
  EXPECT_EQ(q->held(), sb.end);
  q->release(sb.end);
  ASSERT_OK(s.wait(2, long_deadline()));
  EXPECT_TRUE(bytes_equal(dst.host, src.host, kBytes));
}

TEST_P(HeldSubmit, ALaterSubmitPublishesHeldWorkFirst) {
  auto q = queue();
  ASSERT_NE(q, nullptr);
  constexpr size_t kBytes = 2048 + 4;
  Buffer src = random_buffer(kBytes), mid = random_buffer(kBytes), dst = random_buffer(kBytes);
  CommandBuffer a = q->command_buffer(), b = q->command_buffer();
  ASSERT_OK(a.copy(mid.va, src.va, kBytes));
  ASSERT_OK(b.copy(dst.va, mid.va, kBytes));
  QueueSpan sa;
  ASSERT_OK(q->submit_held(a, long_deadline(), &sa));
  ASSERT_OK(q->submit(b, long_deadline()));
  EXPECT_EQ(q->held(), 0u) << "an ordinary submit publishes what is held before it";
  ASSERT_OK(q->wait_done(long_deadline()));
  EXPECT_TRUE(bytes_equal(dst.host, src.host, kBytes)) << "held work ran after the later submit";
}

TEST_P(HeldSubmit, WaitingForHeldWorkReleasesIt) {
  auto q = queue();
  ASSERT_NE(q, nullptr);
  Buffer src = random_buffer(4096), dst = random_buffer(4096);
  CommandBuffer cb = q->command_buffer();
  ASSERT_OK(cb.copy(dst.va, src.va, 4096));
  QueueSpan span;
  ASSERT_OK(q->submit_held(cb, long_deadline(), &span));
  ASSERT_OK(q->wait_done(Deadline::after_ms(5000), span.end));
  EXPECT_EQ(q->held(), 0u);
  EXPECT_TRUE(bytes_equal(dst.host, src.host, 4096));
}

// A 4 KiB ring holds a few submissions: held ones beyond that are published
// for the space, in order, and every one of them runs.
TEST_P(HeldSubmit, HeldWorkThatFillsTheRingIsPublishedForSpace) {
  auto q = queue(4096);
  ASSERT_NE(q, nullptr);
  constexpr int kSubmits = 200;
  constexpr size_t kChunk = 256;
  Buffer src = random_buffer(kSubmits * kChunk), dst = random_buffer(kSubmits * kChunk);
  ASSERT_OK_AND_ASSIGN(Signal s, Signal::create(*dev_));
  CommandBuffer cb = q->command_buffer();
  uint64_t last = 0;
  for (int i = 0; i < kSubmits; ++i) {
    cb.clear();
    ASSERT_OK(cb.copy(dst.va + i * kChunk, src.va + i * kChunk, kChunk));
    ASSERT_OK(s.signal_add(cb, 1));
    QueueSpan span;
    SCOPED_TRACE("submission " + std::to_string(i));
    ASSERT_OK(q->submit_held(cb, Deadline::after_ms(5000), &span));
    last = span.end;
  }
  EXPECT_GT(s.value(), 0u) << "held work that needed the space was published";
  q->release(last);
  ASSERT_OK(s.wait(kSubmits, long_deadline()));
  EXPECT_TRUE(bytes_equal(dst.host, src.host, kSubmits * kChunk));
}

INSTANTIATE_TEST_SUITE_P(Rings, HeldSubmit,
                         ::testing::Values(Engine{"mi300x", 0}, Engine{"h200", 4}),
                         [](const ::testing::TestParamInfo<Engine>& p) {
                           return std::string(p.param.preset[0] == 'h' ? "Gpfifo" : "Sdma");
                         });

}  // namespace
}  // namespace conccl
