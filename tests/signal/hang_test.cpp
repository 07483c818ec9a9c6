// tests/signal/hang_test.cpp - each hang diagnosis, driven by fault injection.
#include <thread>

#include "conccl/sdma_packets.hpp"
#include "signal_fixture.hpp"

namespace conccl::testing {
namespace {

struct Submitted {
  QueueSpan span;
};

class HangTest : public SignalTest {
 protected:
  void SetUp() override {
    SignalTest::SetUp();
    q = queue(0, 2);
    auto s = Signal::create(*dev);
    ASSERT_TRUE(s.ok());
    sig = std::move(s).value();
    src = alloc(0, 4096);
    dst = alloc(1, 4096);
    random_fill(src, 3);
  }
  // copy + signal add, submitted; returns the span.
  QueueSpan submit_copy(CommandBuffer cb) {
    EXPECT_TRUE(cb.copy(dst.va, src.va, 4096).ok());
    EXPECT_TRUE(sig.signal_add(cb, 1).ok());
    QueueSpan span;
    EXPECT_TRUE(q->submit(cb, Deadline::after_ms(1000), &span).ok());
    return span;
  }
  Status wait_short(const QueueSpan& span) {
    const auto t0 = Clock::now();
    Status st = sig.wait(1, Deadline::after_ms(80), &span);
    elapsed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    return st;
  }
  std::unique_ptr<Queue> q;
  Signal sig;
  Buffer src, dst;
  int64_t elapsed_ms = 0;
};

TEST_F(HangTest, NeverFetchedWhenEngineStalled) {
  ASSERT_TRUE(dev->inject(0, 2, emu::Injection{.stall = true}).ok());
  QueueSpan span = submit_copy(q->command_buffer());
  Status st = wait_short(span);
  EXPECT_EQ(st.code(), Code::timeout);
  EXPECT_EQ(classify_hang(span, sig, 1), HangKind::never_fetched);
  EXPECT_NE(st.message().find("never fetched"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("engine 2"), std::string::npos);
  EXPECT_NE(st.message().find("expected >= 1, actual 0"), std::string::npos);
  EXPECT_NE(st.message().find("copy src="), std::string::npos) << "pending packets decoded";
  EXPECT_NE(st.message().find("atomic_add64"), std::string::npos);
  EXPECT_LT(elapsed_ms, 1000);
  // Clearing the stall lets the work finish, with the right bytes.
  ASSERT_TRUE(dev->inject(0, 2, emu::Injection{}).ok());
  EXPECT_TRUE(sig.wait(1, Deadline::after_ms(2000), &span).ok());
  EXPECT_EQ(std::memcmp(src.host, dst.host, 4096), 0);
}

TEST_F(HangTest, StuckOnPollNamesThePoll) {
  Buffer gate = alloc(-1, 256);
  CommandBuffer cb = q->command_buffer();
  ASSERT_TRUE(SdmaPackets(cb).poll(gate.va, 0x77, 0xFF, PollFunc::eq).ok());
  QueueSpan span = submit_copy(std::move(cb));
  // The engine thread reaches the poll on its own time (seconds apart under
  // a sanitizer on a loaded machine): the diagnosis is about a queue that is
  // at the poll, so wait until it is.
  const Deadline at_poll = Deadline::after_ms(5000);
  while (q->engine_status().state != EngineStatus::State::polling && !at_poll.expired())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(q->engine_status().state, EngineStatus::State::polling) << "the engine never reached the poll";
  Status st = wait_short(span);
  EXPECT_EQ(st.code(), Code::timeout);
  EXPECT_EQ(classify_hang(span, sig, 1), HangKind::stuck_on_poll);
  EXPECT_NE(st.message().find("stuck on a poll"), std::string::npos) << st.message();
  char addr[32];
  std::snprintf(addr, sizeof addr, "0x%llx", static_cast<unsigned long long>(gate.va));
  EXPECT_NE(st.message().find(addr), std::string::npos) << "names the polled address";
  EXPECT_NE(st.message().find("== 0x77"), std::string::npos);
  *gate.as<uint32_t>() = 0x77;
  dev->wake_pollers();
  EXPECT_TRUE(sig.wait(1, Deadline::after_ms(2000), &span).ok());
}

TEST_F(HangTest, CompletionLostWhenWriteDropped) {
  ASSERT_TRUE(dev->inject(0, 2, emu::Injection{.drop_completions = 2}).ok());
  QueueSpan span = submit_copy(q->command_buffer());
  Status st = wait_short(span);
  EXPECT_EQ(st.code(), Code::timeout);
  EXPECT_EQ(classify_hang(span, sig, 1), HangKind::completion_lost);
  EXPECT_NE(st.message().find("completion write was lost"), std::string::npos) << st.message();
  EXPECT_GE(q->completed(), span.end);
  EXPECT_EQ(sig.value(), 0u);
  EXPECT_EQ(std::memcmp(src.host, dst.host, 4096), 0) << "the copy itself ran";
  auto stats = dev->engine_stats(0, 2);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->dropped_completions, 2u);
}

TEST_F(HangTest, HaltedEngineIsAFaultNotATimeout) {
  CommandBuffer cb = q->command_buffer();
  ASSERT_TRUE(cb.copy(dst.va, 0x7f0000001000ull, 64).ok());  // a host-like pointer
  QueueSpan span = submit_copy(std::move(cb));
  Status st = sig.wait(1, Deadline::after_ms(2000), &span);
  EXPECT_EQ(st.code(), Code::device_fault) << st.to_string();
  EXPECT_NE(st.message().find("page fault"), std::string::npos);
  EXPECT_LT(elapsed_ms, 1000);
  ASSERT_TRUE(dev->reset_engine(0, 2).ok());
}

TEST_F(HangTest, SlowEngineIsStillRunning) {
  ASSERT_TRUE(dev->inject(0, 2, emu::Injection{.delay = std::chrono::microseconds(150000)}).ok());
  QueueSpan span = submit_copy(q->command_buffer());
  Status st = sig.wait(1, Deadline::after_ms(200), &span);
  EXPECT_EQ(st.code(), Code::timeout);
  // The engine is busy on the first packet (rptr at the start) or past it; either
  // way the verdict is not "lost" or "poll".
  const HangKind k = classify_hang(span, sig, 1);
  EXPECT_TRUE(k == HangKind::never_fetched || k == HangKind::still_running) << hang_kind_name(k);
  ASSERT_TRUE(dev->inject(0, 2, emu::Injection{}).ok());
  EXPECT_TRUE(sig.wait(1, Deadline::after_ms(3000), &span).ok());
}

}  // namespace
}  // namespace conccl::testing
