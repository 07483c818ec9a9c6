// tests/signal/signal_test.cpp - signal values, ordering, DMA-side 64-bit
// waits, triggers, HSA-signal packets, deadlines.
#include <atomic>
#include <thread>

#include "conccl/sdma_packets.hpp"
#include "signal_fixture.hpp"

namespace conccl::testing {
namespace {

constexpr int64_t kMs = 2000;

TEST_F(SignalTest, HostSetAddAndTwin) {
  auto s = Signal::create(*dev, -1, 5);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->value(), 5u);
  EXPECT_EQ(s->add(3), 8u);
  s->set(0xFFFFFFFFull);
  EXPECT_EQ(s->value(), 0xFFFFFFFFull);
  auto* raw = static_cast<uint64_t*>(dev->host_pointer(s->va(), 16));
  ASSERT_NE(raw, nullptr);
  EXPECT_EQ(raw[1], 0xFFFFFFFFull + Signal::kTwinOffset);
  EXPECT_TRUE(s->wait(0xFFFFFFFFull, Deadline::after_ms(10)).ok());
}

TEST_F(SignalTest, WaitTimesOutWithinDeadline) {
  auto s = Signal::create(*dev);
  ASSERT_TRUE(s.ok());
  const auto t0 = Clock::now();
  Status st = s->wait(1, Deadline::after_ms(50));
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  EXPECT_EQ(st.code(), Code::timeout);
  EXPECT_NE(st.message().find("did not reach 1"), std::string::npos) << st.message();
  EXPECT_GE(ms, 50);
  EXPECT_LT(ms, 1000);
}

// Once the signal reaches v, every byte written by the work before it is
// visible: many rounds of random copies, each checked as soon as its signal
// value is seen.
TEST_F(SignalTest, OrderingBytesVisibleWhenSignalSeen) {
  auto q = queue(0, 2);
  auto s = Signal::create(*dev);
  ASSERT_TRUE(q && s.ok());
  constexpr size_t kBytes = 256 * 1024;
  Buffer src = alloc(0, kBytes), dst = alloc(1, kBytes);
  for (uint64_t round = 1; round <= 40; ++round) {
    random_fill(src, round);
    dev->wake_pollers();
    CommandBuffer cb = q->command_buffer();
    ASSERT_TRUE(cb.copy(dst.va, src.va, kBytes).ok());
    ASSERT_TRUE(s->signal_add(cb, 1).ok());
    QueueSpan span;
    ASSERT_TRUE(q->submit(cb, Deadline::after_ms(kMs), &span).ok());
    ASSERT_TRUE(s->wait(round, Deadline::after_ms(kMs), &span).ok());
    ASSERT_EQ(std::memcmp(src.host, dst.host, kBytes), 0) << "round " << round;
  }
}

// A DMA queue waits for another queue's signal, across the 32-bit boundary of
// the low word, and for targets whose low word is in the upper half (twin).
class DmaWaitTest : public SignalTest, public ::testing::WithParamInterface<uint64_t> {};

TEST_P(DmaWaitTest, WaitsForExact64BitTarget) {
  const uint64_t target = GetParam();
  auto waiter = queue(1, 2), producer = queue(0, 3);
  auto s = Signal::create(*dev, -1, target - 3);
  ASSERT_TRUE(waiter && producer && s.ok());
  Buffer flag = alloc(-1, 256);
  CommandBuffer cb = waiter->command_buffer();
  ASSERT_TRUE(s->wait_ge(cb, target).ok());
  ASSERT_TRUE(SdmaPackets(cb).fence(flag.va, 0xC0FFEE).ok());
  ASSERT_TRUE(waiter->submit(cb, Deadline::after_ms(kMs)).ok());
  auto* f = flag.as<volatile uint32_t>();
  for (int step = 0; step < 2; ++step) {  // target-2, target-1: must not pass
    CommandBuffer p = producer->command_buffer();
    ASSERT_TRUE(s->signal_add(p, 1).ok());
    ASSERT_TRUE(producer->submit(p, Deadline::after_ms(kMs)).ok());
    ASSERT_TRUE(producer->wait_done(Deadline::after_ms(kMs)).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    EXPECT_EQ(*f, 0u) << "passed early at value " << s->value();
  }
  CommandBuffer p = producer->command_buffer();
  ASSERT_TRUE(s->signal_add(p, 1).ok());
  ASSERT_TRUE(producer->submit(p, Deadline::after_ms(kMs)).ok());
  ASSERT_TRUE(waiter->wait_done(Deadline::after_ms(kMs)).ok()) << waiter->diagnose();
  EXPECT_EQ(*f, 0xC0FFEEu);
  // The waiter may pass on the twin a moment before the producer's last
  // packet (the add on the value itself) has run.
  ASSERT_TRUE(producer->wait_done(Deadline::after_ms(kMs)).ok());
  EXPECT_EQ(s->value(), target);
}

INSTANTIATE_TEST_SUITE_P(Targets, DmaWaitTest,
                         ::testing::Values(10ull, 0x100000001ull, 0x100000000ull, 0x17FFFFFFFull,
                                           0x180000005ull, 0x2FFFFFFFFull, 0x7FFFFFFFFFFF0000ull));

// The value is already far above the target in the high word while its low
// word is below the target's: the wait must pass at once.
TEST_F(SignalTest, DmaWaitPassesWhenHighWordAlreadyAbove) {
  auto q = queue(0, 2);
  auto s = Signal::create(*dev, -1, 0x500000001ull);
  ASSERT_TRUE(q && s.ok());
  Buffer flag = alloc(-1, 256);
  for (uint64_t target : {0x1FFFFFFF0ull, 0x480000000ull, 0x4FFFFFFFFull}) {
    CommandBuffer cb = q->command_buffer();
    ASSERT_TRUE(s->wait_ge(cb, target).ok());
    ASSERT_TRUE(SdmaPackets(cb).fence(flag.va, static_cast<uint32_t>(target)).ok());
    ASSERT_TRUE(q->submit(cb, Deadline::after_ms(kMs)).ok());
    ASSERT_TRUE(q->wait_done(Deadline::after_ms(kMs)).ok()) << q->diagnose();
    EXPECT_EQ(*flag.as<uint32_t>(), static_cast<uint32_t>(target));
  }
}

TEST_F(SignalTest, EnqueueWriteStoresAbsoluteValue) {
  auto q = queue(0, 2);
  auto s = Signal::create(*dev);
  ASSERT_TRUE(q && s.ok());
  CommandBuffer cb = q->command_buffer();
  ASSERT_TRUE(s->signal_set(cb, 0x123456789ABCull).ok());
  ASSERT_TRUE(q->submit(cb, Deadline::after_ms(kMs)).ok());
  ASSERT_TRUE(s->wait(0x123456789ABCull, Deadline::after_ms(kMs)).ok());
  // The value is written by two 32-bit FENCEs; finish the queue before
  // reading the twin and freeing the signal (ThreadSanitizer does not order a
  // 32-bit store before a 64-bit load).
  ASSERT_TRUE(q->wait_done(Deadline::after_ms(kMs)).ok());
  auto* raw = static_cast<uint64_t*>(dev->host_pointer(s->va(), 16));
  EXPECT_EQ(raw[1], 0x123456789ABCull + Signal::kTwinOffset);
}

TEST_F(SignalTest, HostWaitWakesOnTrapAfterSleeping) {
  auto q = queue(0, 2);
  auto s = Signal::create(*dev);
  auto trig = Trigger::create(*dev);
  ASSERT_TRUE(q && s.ok() && trig.ok());
  CommandBuffer cb = q->command_buffer();
  ASSERT_TRUE(trig->arm(cb).ok());
  ASSERT_TRUE(s->signal_add(cb, 1).ok());
  ASSERT_TRUE(SdmaPackets(cb).trap(42).ok());
  QueueSpan span;
  ASSERT_TRUE(q->submit(cb, Deadline::after_ms(kMs), &span).ok());
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the waiter is asleep by now
    trig->release();
  });
  EXPECT_TRUE(s->wait(1, Deadline::after_ms(kMs), &span).ok());
  releaser.join();
  EXPECT_TRUE(q->wake_event()->wait(1, Deadline::after_ms(kMs)).ok());
  EXPECT_EQ(q->wake_event()->last_context(), 42u);
}

// Commands queued behind a trigger do nothing until one write releases them;
// a trigger is reusable, and another queue can release it.
TEST_F(SignalTest, TriggerGatesPrelaunchedWork) {
  auto q = queue(0, 2), other = queue(1, 3);
  auto trig = Trigger::create(*dev);
  ASSERT_TRUE(q && other && trig.ok());
  Buffer src = alloc(0, 4096), dst = alloc(1, 4096);
  random_fill(src, 7);
  for (int round = 0; round < 3; ++round) {
    std::memset(dst.host, 0, 4096);
    dev->wake_pollers();
    CommandBuffer cb = q->command_buffer();
    ASSERT_TRUE(trig->arm(cb).ok());
    ASSERT_TRUE(cb.copy(dst.va, src.va, 4096).ok());
    QueueSpan end_span;
    ASSERT_TRUE(q->submit(cb, Deadline::after_ms(kMs), &end_span).ok());
    const uint64_t end = end_span.end;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_LT(q->completed(), end) << "gated work ran before release";
    EXPECT_NE(std::memcmp(src.host, dst.host, 4096), 0);
    if (round == 1) {  // device release from another queue
      CommandBuffer r = other->command_buffer();
      ASSERT_TRUE(trig->enqueue_release(r).ok());
      ASSERT_TRUE(other->submit(r, Deadline::after_ms(kMs)).ok());
    } else {
      trig->release();
    }
    ASSERT_TRUE(q->wait_done(Deadline::after_ms(kMs), end).ok()) << q->diagnose();
    EXPECT_EQ(std::memcmp(src.host, dst.host, 4096), 0);
  }
}

// amd_signal_t semantics: value decremented, event id written to the mailbox,
// TRAP raised with the event id.
TEST_F(SignalTest, HsaSignalDecrementMailboxAndEvent) {
  auto q = queue(0, 2);
  ASSERT_TRUE(q);
  Buffer hsa = alloc(-1, 64);  // amd_signal_t: kind +0, value +8, mailbox ptr +16, event id +24
  Buffer mailbox = alloc(-1, 64);
  auto* v = reinterpret_cast<int64_t*>(hsa.as<uint8_t>() + 8);
  *v = 3;
  HsaSignalView view{hsa.va + 8, mailbox.va, 0x51};
  CommandBuffer cb = q->command_buffer();
  ASSERT_TRUE(enqueue_hsa_signal_decrement(cb, view, 1).ok());
  ASSERT_TRUE(enqueue_hsa_signal_decrement(cb, view, 2).ok());
  ASSERT_TRUE(q->submit(cb, Deadline::after_ms(kMs)).ok());
  ASSERT_TRUE(q->wake_event()->wait(2, Deadline::after_ms(kMs)).ok());
  ASSERT_TRUE(q->wait_done(Deadline::after_ms(kMs)).ok());
  EXPECT_EQ(*v, 0);
  EXPECT_EQ(*mailbox.as<uint32_t>(), 0x51u);
  EXPECT_EQ(q->wake_event()->last_context(), 0x51u);
  // Without a mailbox: no TRAP.
  CommandBuffer cb2 = q->command_buffer();
  ASSERT_TRUE(enqueue_hsa_signal_decrement(cb2, HsaSignalView{hsa.va + 8, 0, 0}, -5).ok());
  ASSERT_TRUE(q->submit(cb2, Deadline::after_ms(kMs)).ok());
  ASSERT_TRUE(q->wait_done(Deadline::after_ms(kMs)).ok());
  EXPECT_EQ(*v, 5);
  EXPECT_EQ(q->wake_event()->count(), 2u);
  EXPECT_EQ(enqueue_hsa_signal_decrement(cb2, HsaSignalView{}, 1).code(), Code::invalid_argument);
}

TEST_F(SignalTest, ComputeWaitNamesAddressAndValue) {
  auto s = Signal::create(*dev);
  ASSERT_TRUE(s.ok());
  auto w = s->compute_wait(9);
  EXPECT_EQ(w.address, s->va());
  EXPECT_EQ(w.value, 9u);
}

TEST_F(SignalTest, WrapRejectsBadMemory) {
  EXPECT_EQ(Signal::wrap(*dev, 0x1001, reinterpret_cast<void*>(0x1001)).status().code(), Code::invalid_argument);
  EXPECT_EQ(Signal::wrap(*dev, 0x1000, nullptr).status().code(), Code::invalid_argument);
}

// Many producers on several queues advance one signal; the host sees the sum.
TEST_F(SignalTest, ManyQueuesAddToOneSignal) {
  auto s = Signal::create(*dev);
  ASSERT_TRUE(s.ok());
  std::vector<std::unique_ptr<Queue>> qs;
  for (int g = 0; g < 2; ++g)
    for (int e = 0; e < 4; ++e) qs.push_back(queue(g, e));
  std::vector<std::thread> threads;
  for (auto& q : qs)
    threads.emplace_back([&s, q = q.get()] {
      for (int i = 0; i < 50; ++i) {
        CommandBuffer cb = q->command_buffer();
        EXPECT_TRUE(s->signal_add(cb, 3).ok());
        EXPECT_TRUE(q->submit(cb, Deadline::after_ms(kMs)).ok());
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_TRUE(s->wait(8 * 50 * 3, Deadline::after_ms(kMs)).ok());
  EXPECT_EQ(s->value(), 8u * 50 * 3);
}

// Deadlines saturate: "wait forever" spans (INT64_MAX ms, nanoseconds::max)
// are the clock's last instant, not an overflow into the past that would
// make every wait time out at once; a negative span is "now".
TEST(Deadline, HugeSpansSaturateAndNegativeIsNow) {
  for (Deadline d : {Deadline::after_ms(INT64_MAX), Deadline::after(std::chrono::nanoseconds::max()),
                     Deadline::after(std::chrono::hours(24 * 365 * 200))}) {
    EXPECT_FALSE(d.expired());
    EXPECT_GT(d.remaining(), std::chrono::hours(24 * 365 * 100));
  }
  EXPECT_EQ(Deadline::after_ms(INT64_MAX).at(), Clock::time_point::max());
  EXPECT_TRUE(Deadline::after_ms(-5).expired());
  EXPECT_TRUE(Deadline::after(std::chrono::nanoseconds::min()).expired());
  const Deadline soon = Deadline::after_ms(50);
  EXPECT_FALSE(soon.expired());
  EXPECT_LE(soon.remaining(), std::chrono::milliseconds(50));
}

}  // namespace
}  // namespace conccl::testing
