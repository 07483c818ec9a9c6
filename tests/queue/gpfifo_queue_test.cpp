// tests/queue/gpfifo_queue_test.cpp - the GPFIFO protocol (the code that
// drives the H200's channels) against the emulated H200: every vocabulary
// command executed with random data and every byte checked, pushbuffer and
// GP-entry reuse over thousands of submissions, direct recording into the
// pushbuffer, cross-queue waits, several producers, faults (MMU fault, bad
// method, unbound subchannel, the signed 64-bit reduction hardware traps on),
// dropped completions and hang diagnosis, GRCEs refused.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <thread>

#include "conccl/emu.hpp"
#include "conccl/signal.hpp"
#include "backends/emu/emu_test_util.hpp"
#include "packets/hopper_ce.hpp"
#include "queue/gpfifo_queue.hpp"

namespace conccl {
namespace {

using namespace conccl::test;

class Gpfifo : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<emu::EmuDevice>> d = emu::create(options("h200", 2, 0, "", 256u << 20));
    ASSERT_OK(d.status());
    dev_ = std::move(d).value();
  }
  std::unique_ptr<Queue> queue(int gpu, int lce, size_t ring = 64 << 10) {
    Result<std::unique_ptr<Queue>> q = make_queue(*dev_, gpu, lce, ring);
    EXPECT_TRUE(q.ok()) << q.status().to_string();
    return q.ok() ? std::move(q).value() : nullptr;
  }
  Buffer alloc(int gpu, size_t bytes, MemKind kind = MemKind::device) {
    Result<Buffer> b = dev_->alloc(gpu, bytes, kind);
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    return b.ok() ? *b : Buffer{};
  }
  std::unique_ptr<emu::EmuDevice> dev_;
  std::mt19937_64 rng_{0x6F1F0};
};

TEST_F(Gpfifo, TopologyIsTheH200s) {
  const Topology& t = dev_->topology();
  ASSERT_EQ(t.gpus.size(), 2u);
  const GpuInfo& g = t.gpus[0];
  EXPECT_EQ(g.isa, Isa::hopper());
  ASSERT_EQ(g.engines.size(), 3u);
  EXPECT_EQ(g.engines[0].id, 2);
  EXPECT_EQ(g.engines[2].id, 4);
  EXPECT_EQ(g.engines[2].weight, 12);
  EXPECT_EQ(g.engines[2].kind, EngineKind::copy);
  ASSERT_NE(g.link_to(1), nullptr);
  EXPECT_EQ(g.link_to(1)->type, "nvlink");
  for (int lce : {0, 1}) {
    Result<std::unique_ptr<Queue>> q = make_queue(*dev_, 0, lce);
    ASSERT_FALSE(q.ok());
    EXPECT_EQ(q.status().code(), Code::invalid_argument);
    EXPECT_TRUE(contains(q.status().message(), "GRCE")) << q.status().message();
  }
  EXPECT_EQ(make_queue(*dev_, 0, 7).status().code(), Code::invalid_argument);
  EXPECT_EQ(make_queue(*dev_, 0, 4, 3000).status().code(), Code::invalid_argument);
  DeviceOptions o = options("h200", 0, 4);
  EXPECT_EQ(emu::create(o).status().code(), Code::invalid_argument) << "--engines does not apply";
}

TEST_F(Gpfifo, EveryCommandDoesWhatItSays) {
  auto q = queue(0, 4);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->isa(), Isa::hopper());
  constexpr size_t kBytes = 3 * 4096 + 13;
  Buffer src = alloc(0, kBytes), dst = alloc(1, kBytes), fill = alloc(0, 4096);
  Buffer slot = alloc(-1, 64, MemKind::host);
  fill_random(src.host, kBytes, rng_);
  fill_random(dst.host, kBytes, rng_);
  ASSERT_OK_AND_ASSIGN(Signal sig, Signal::create(*dev_));
  CommandBuffer cb = q->command_buffer();
  ASSERT_OK(cb.copy(dst.va + 1, src.va + 3, kBytes - 3));
  ASSERT_OK(cb.fill(fill.va + 16, 0x5EEDF00Du, 4096 - 32));
  ASSERT_OK(cb.timestamp(slot.va));
  ASSERT_OK(sig.signal_add(cb, 7));
  ASSERT_OK(sig.signal_add(cb, 0x100000000ull));  // carries into the high word: 64-bit adds
  const uint64_t before = q->submitted();
  QueueSpan end_span;
  ASSERT_OK(q->submit(cb, long_deadline(), &end_span));
  const uint64_t end = end_span.end;
  EXPECT_EQ(end, before + 1) << "tickets are timeline values";
  ASSERT_OK(sig.wait(0x100000007ull, long_deadline()));
  ASSERT_OK(q->wait_done(long_deadline(), end));
  EXPECT_TRUE(bytes_equal(static_cast<uint8_t*>(dst.host) + 1, static_cast<uint8_t*>(src.host) + 3, kBytes - 3));
  const auto* f = fill.as<uint32_t>();
  for (size_t i = 4; i < 4096 / 4 - 4; ++i) ASSERT_EQ(f[i], 0x5EEDF00Du) << i;
  EXPECT_EQ(f[3], 0u);
  EXPECT_EQ(f[4096 / 4 - 4], 0u);
  EXPECT_GT(host_load64(slot.as<uint8_t>() + caps(Isa::hopper()).timestamp_offset), 0u) << "engine time at +8";
  // Store an absolute value, then wait for it on another queue.
  cb.clear();
  ASSERT_OK(sig.signal_set(cb, 5));
  ASSERT_OK(run(*q, cb));
  EXPECT_EQ(sig.value(), 5u);
}

// The copy engine's own add (copy_add): the copy lands, then the 64-bit value
// grows by the delta, carrying out of the low word; copies from two engines
// add into one signal.
TEST_F(Gpfifo, CopyAddLandsTheDataThenAdds) {
  auto a = queue(0, 4), b = queue(0, 2);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  constexpr size_t kBytes = 5000;
  Buffer src = alloc(0, kBytes), d0 = alloc(1, kBytes), d1 = alloc(0, kBytes);
  fill_random(src.host, kBytes, rng_);
  fill_random(d0.host, kBytes, rng_);
  fill_random(d1.host, kBytes, rng_);
  ASSERT_OK_AND_ASSIGN(Signal sig, Signal::create(*dev_));
  sig.set(0xFFFFFFFEull);
  CommandBuffer ca = a->command_buffer(), cb = b->command_buffer();
  ASSERT_OK(sig.copy_add(ca, d0.va, src.va, kBytes, CommandBuffer::CopyOrder::after_earlier, 1));
  ASSERT_OK(sig.copy_add(cb, d1.va, src.va, kBytes, CommandBuffer::CopyOrder::after_earlier, 0x100000001ull));
  ASSERT_OK(run(*a, ca));
  ASSERT_OK(run(*b, cb));
  EXPECT_EQ(sig.value(), 0x200000000ull);
  EXPECT_TRUE(bytes_equal(d0.host, src.host, kBytes));
  EXPECT_TRUE(bytes_equal(d1.host, src.host, kBytes));
  // The forms the hardware refuses fault here as well.
  const uint32_t lo = static_cast<uint32_t>(sig.va()), hi = static_cast<uint32_t>(sig.va() >> 32);
  const uint32_t base = (1u << 2) | (1u << 3) | (1u << 27) | (1u << 19);
  struct Case {
    const char* name;
    uint32_t launch;
    const char* needle;
  };
  for (const Case& c : {Case{"signed two-word IADD", base | (5u << 14), "unsigned"},
                        Case{"two-word INC", base | (6u << 14) | (1u << 18), "INC/DEC"},
                        Case{"reduction without a semaphore", (1u << 19) | (5u << 14), "semaphore_type"}}) {
    SCOPED_TRACE(c.name);
    auto q = queue(0, 3);
    ASSERT_NE(q, nullptr);
    CommandBuffer f = q->command_buffer();
    const std::vector<uint32_t> dw = {hopper::inc_header(4, 0x240, 4), hi, lo, 1, 0, hopper::inc_header(4, 0x300, 1),
                                      c.launch};
    ASSERT_OK(f.raw(dw));
    Status st = run(*q, f);
    EXPECT_EQ(st.code(), Code::device_fault);
    EXPECT_TRUE(contains(st.message(), c.needle)) << st.message();
  }
}

TEST_F(Gpfifo, WaitGeHoldsTheQueueUntilTheSignalArrives) {
  auto a = queue(0, 2), b = queue(1, 4);
  ASSERT_TRUE(a && b);
  ASSERT_OK_AND_ASSIGN(Signal s, Signal::create(*dev_));
  Buffer src = alloc(0, 4096), dst = alloc(1, 4096);
  fill_random(src.host, 4096, rng_);
  CommandBuffer wb = b->command_buffer();
  ASSERT_OK(s.wait_ge(wb, 0x200000000ull));  // only the high word decides: 64-bit compare
  ASSERT_OK(wb.copy(dst.va, src.va, 4096));
  QueueSpan end_span;
  ASSERT_OK(b->submit(wb, long_deadline(), &end_span));
  const uint64_t end = end_span.end;
  EXPECT_EQ(b->wait_done(Deadline::after_ms(20), end).code(), Code::timeout);
  EngineStatus es = b->engine_status();
  EXPECT_EQ(es.state, EngineStatus::State::polling);
  EXPECT_EQ(es.wait.bits, 64);
  EXPECT_EQ(es.wait.addr, s.va());
  EXPECT_EQ(es.wait.target, 0x200000000ull);
  EXPECT_EQ(es.wait.seen, 0u);
  EXPECT_EQ(es.wait.mask, ~0ull);
  EXPECT_EQ(es.wait.compare, EngineStatus::Compare::ge);  // wait_ge: ACQ_STRICT_GEQ
  EXPECT_EQ(es.wait.queue, b->id());
  EXPECT_TRUE(contains(es.detail(), "semaphore acquire")) << es.detail();
  char want[96];
  std::snprintf(want, sizeof want, ": *(u64*)0x%llx >= 0x200000000; it reads 0x0)",
                static_cast<unsigned long long>(s.va()));
  EXPECT_TRUE(contains(es.detail(), want)) << es.detail() << "\nwant: " << want;
  s.set(0x1FFFFFFFFull);
  EXPECT_EQ(b->wait_done(Deadline::after_ms(20), end).code(), Code::timeout) << "one below the target";
  CommandBuffer sb = a->command_buffer();
  ASSERT_OK(s.signal_add(sb, 1));
  ASSERT_OK(run(*a, sb));
  ASSERT_OK(b->wait_done(long_deadline(), end));
  EXPECT_TRUE(bytes_equal(dst.host, src.host, 4096));
}

TEST_F(Gpfifo, PushbufferAndGpEntriesAreReusedForever) {
  auto q = queue(0, 3, 4096);  // 4 KiB pushbuffer: wraps every few submissions
  ASSERT_NE(q, nullptr);
  ASSERT_OK_AND_ASSIGN(Signal s, Signal::create(*dev_));
  Buffer src = alloc(0, 64 * 1024), dst = alloc(0, 64 * 1024);
  fill_random(src.host, 64 * 1024, rng_);
  constexpr int kRounds = 3000;  // > 1024 GP entries: the GP ring wraps too
  for (int i = 0; i < kRounds; ++i) {
    CommandBuffer cb = q->command_buffer();
    const uint64_t off = static_cast<uint64_t>(i % 64) * 1024;
    ASSERT_OK(cb.copy(dst.va + off, src.va + off, 1024));
    ASSERT_OK(s.signal_add(cb, 1));
    ASSERT_OK(q->submit(cb, long_deadline()));
  }
  ASSERT_OK(s.wait(kRounds, long_deadline()));
  ASSERT_OK(q->wait_done(long_deadline()));
  EXPECT_EQ(q->completed(), q->submitted());
  EXPECT_TRUE(bytes_equal(dst.host, src.host, 64 * 1024));
  CommandBuffer big = q->command_buffer();
  ASSERT_OK(big.set_max_bytes(CommandBuffer::kMaxBytes));  // past what the queue's own buffers record
  for (int i = 0; i < 300; ++i) ASSERT_OK(big.copy(dst.va, src.va, 64));
  Status st = q->submit(big, long_deadline());
  EXPECT_EQ(st.code(), Code::invalid_argument) << "more than half the pushbuffer";
  EXPECT_TRUE(contains(st.message(), "pushbuffer")) << st.message();
}

TEST_F(Gpfifo, ReserveWritesStraightIntoThePushbuffer) {
  auto q = queue(0, 4);
  ASSERT_NE(q, nullptr);
  Buffer src = alloc(0, 8192), dst = alloc(0, 8192);
  fill_random(src.host, 8192, rng_);
  ASSERT_OK_AND_ASSIGN(Signal s, Signal::create(*dev_));
  for (int round = 1; round <= 50; ++round) {
    // 60 bytes: a copy (9 dwords) and a signal add (6 dwords), nothing more.
    ASSERT_OK_AND_ASSIGN(Queue::Reservation r, q->reserve(60, long_deadline()));
    ASSERT_OK(r.commands().copy(dst.va + round * 64, src.va + round * 64, 64));
    ASSERT_OK(s.signal_add(r.commands(), 1));
    EXPECT_EQ(r.commands().copy(dst.va, src.va, 64).code(), Code::resource_exhausted) << "past the reservation";
    QueueSpan span;
    ASSERT_OK(r.commit(&span));
    EXPECT_EQ(span.queue, q.get());
    EXPECT_EQ(span.end, q->submitted());
    EXPECT_LT(span.begin, span.end);
    EXPECT_EQ(r.commit().code(), Code::invalid_argument) << "committed once";
    ASSERT_OK(q->wait_done(long_deadline(), span.end));
    EXPECT_EQ(s.value(), static_cast<uint64_t>(round));
  }
  EXPECT_TRUE(bytes_equal(dst.as<uint8_t>() + 64, src.as<uint8_t>() + 64, 50 * 64));
  // An abandoned reservation publishes nothing. (Compared with submitted()
  // before it, not with completed(): a wait that sleeps on the engine's
  // interrupt arms it with a submission of its own, which may still be in
  // flight here.)
  ASSERT_OK(q->wait_done(long_deadline()));
  const uint64_t before = q->submitted();
  {
    ASSERT_OK_AND_ASSIGN(Queue::Reservation r, q->reserve(64, long_deadline()));
    ASSERT_OK(r.commands().copy(dst.va, src.va, 64));
  }
  EXPECT_EQ(q->submitted(), before);
  ASSERT_OK(q->wait_done(long_deadline()));
  EXPECT_EQ(q->reserve(6, long_deadline()).status().code(), Code::invalid_argument);
}

TEST_F(Gpfifo, SeveralProducersOnOneChannel) {
  auto q = queue(0, 4, 16 << 10);
  ASSERT_NE(q, nullptr);
  ASSERT_OK_AND_ASSIGN(Signal s, Signal::create(*dev_));
  constexpr int kThreads = 4, kPer = 300;
  Buffer src = alloc(0, kThreads * kPer * 16), dst = alloc(0, kThreads * kPer * 16);
  fill_random(src.host, src.size, rng_);
  std::vector<std::thread> ts;
  std::atomic<int> bad{0};
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < kPer; ++i) {
        const uint64_t off = static_cast<uint64_t>(t * kPer + i) * 16;
        CommandBuffer cb = q->command_buffer();
        if (!cb.copy(dst.va + off, src.va + off, 16).ok() || !s.signal_add(cb, 1).ok() ||
            !q->submit(cb, long_deadline()).ok())
          bad.fetch_add(1);
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
  ASSERT_OK(s.wait(kThreads * kPer, long_deadline()));
  ASSERT_OK(q->wait_done(long_deadline()));
  EXPECT_TRUE(bytes_equal(dst.host, src.host, src.size));
}

TEST_F(Gpfifo, MmuFaultKillsOnlyThatChannel) {
  auto q = queue(0, 4), other = queue(0, 2);
  ASSERT_TRUE(q && other);
  Buffer src = alloc(0, 4096);
  CommandBuffer cb = q->command_buffer();
  ASSERT_OK(cb.copy(0x00007F0000000000ull, src.va, 4096));  // nothing is mapped there
  QueueSpan end_span;
  ASSERT_OK(q->submit(cb, long_deadline(), &end_span));
  const uint64_t end = end_span.end;
  Status st = q->wait_done(long_deadline(), end);
  EXPECT_EQ(st.code(), Code::device_fault);
  EXPECT_TRUE(contains(st.message(), "MMU fault")) << st.message();
  EXPECT_TRUE(contains(st.message(), "copy destination")) << st.message();
  EXPECT_TRUE(contains(st.message(), "copy.launch_dma")) << "pending methods decoded: " << st.message();
  EXPECT_EQ(q->engine_status().state, EngineStatus::State::halted);
  EXPECT_EQ(q->submit(cb, Deadline::after_ms(100)).code(), Code::device_fault) << "the channel is dead";
  // The engine's other channel still works.
  Buffer dst = alloc(0, 4096);
  fill_random(src.host, 4096, rng_);
  CommandBuffer ok = other->command_buffer();
  ASSERT_OK(ok.copy(dst.va, src.va, 4096));
  ASSERT_OK(run(*other, ok));
  EXPECT_TRUE(bytes_equal(dst.host, src.host, 4096));
}

TEST_F(Gpfifo, MethodsTheHardwareRefusesFaultTheChannel) {
  struct Case {
    const char* name;
    std::vector<uint32_t> dw;
    const char* needle;
  };
  const Buffer sem = alloc(-1, 64, MemKind::host);
  const uint32_t lo = static_cast<uint32_t>(sem.va), hi = static_cast<uint32_t>(sem.va >> 32);
  const std::vector<Case> cases = {
      {"signed 64-bit IADD", {hopper::inc_header(0, 0x5C, 5), lo, hi, 1, 0, 6u | (1u << 24) | (5u << 27)},
       "signed 64-bit IADD"},
      {"64-bit INC", {hopper::inc_header(0, 0x5C, 5), lo, hi, 1, 0, 6u | (1u << 24) | (6u << 27) | (1u << 31)},
       "INC/DEC"},
      {"copy method on an unbound subchannel", {hopper::inc_header(3, 0x418, 1), 64}, "SET_OBJECT"},
      {"class not emulated", {hopper::inc_header(5, 0x000, 1), 0xC86F}, "not emulated"},
      {"misaligned 64-bit semaphore", {hopper::inc_header(0, 0x5C, 5), lo + 4, hi, 1, 0, 1u | (1u << 24)},
       "8-byte aligned"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto q = queue(0, 4);
    ASSERT_NE(q, nullptr);
    CommandBuffer cb = q->command_buffer();
    ASSERT_OK(cb.raw(c.dw));
    Status st = run(*q, cb);
    EXPECT_EQ(st.code(), Code::device_fault);
    EXPECT_TRUE(contains(st.message(), c.needle)) << st.message();
  }
}

TEST_F(Gpfifo, DroppedCompletionIsDiagnosed) {
  auto q = queue(0, 4);
  ASSERT_NE(q, nullptr);
  ASSERT_OK_AND_ASSIGN(Signal s, Signal::create(*dev_));
  ASSERT_OK(q->wait_done(long_deadline()));  // nothing of the queue's set-up still in flight
  emu::Injection inj;
  inj.drop_completions = 1;
  ASSERT_OK(dev_->inject(0, 4, inj));
  CommandBuffer cb = q->command_buffer();
  ASSERT_OK(s.signal_add(cb, 1));
  QueueSpan span;
  ASSERT_OK(q->submit(cb, long_deadline(), &span));
  ASSERT_OK(q->wait_done(long_deadline(), span.end));  // the timeline release after it still lands
  Status st = s.wait(1, Deadline::after_ms(50), &span);
  EXPECT_EQ(st.code(), Code::timeout);
  EXPECT_EQ(classify_hang(span, s, 1), HangKind::completion_lost) << st.message();
  ASSERT_OK_AND_ASSIGN(emu::EngineStats stats, dev_->engine_stats(0, 4));
  EXPECT_EQ(stats.dropped_completions, 1u);
}

TEST_F(Gpfifo, WakeRaisesTheChannelsEvent) {
  auto q = queue(0, 2);
  ASSERT_NE(q, nullptr);
  ASSERT_NE(q->wake_event(), nullptr);
  const uint64_t before = q->wake_event()->count();
  CommandBuffer cb = q->command_buffer();
  ASSERT_OK(q->record_wake(cb));
  ASSERT_OK(q->submit(cb, long_deadline()));
  ASSERT_OK(q->wake_event()->wait(before + 1, long_deadline()));
  // A long wait sleeps (arming the interrupt) rather than spinning through it.
  Buffer a = alloc(0, 8 << 20), b = alloc(0, 8 << 20);
  auto* g = dynamic_cast<GpfifoQueue*>(q.get());
  ASSERT_NE(g, nullptr);
  emu::Injection slow;
  slow.delay = std::chrono::microseconds(2000);
  ASSERT_OK(dev_->inject(0, 2, slow));
  cb.clear();
  ASSERT_OK(cb.copy(b.va, a.va, 8 << 20));
  QueueSpan end_span;
  ASSERT_OK(q->submit(cb, long_deadline(), &end_span));
  const uint64_t end = end_span.end;
  ASSERT_OK(q->wait_done(long_deadline(), end));
  EXPECT_GE(g->wait_stats().irq_arms, 1u);
  ASSERT_OK(dev_->inject(0, 2, emu::Injection{}));
}

}  // namespace
}  // namespace conccl
