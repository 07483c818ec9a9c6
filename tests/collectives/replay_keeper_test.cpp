// tests/collectives/replay_keeper_test.cpp - the keeper that arms captured
// calls' replays (src/collectives/replay_keeper.hpp), against a scripted
// capture: in the ahead form how far it arms and that it re-arms as replays
// end, in the on-tick form that nothing is armed before its tick and each
// replay right after it, that a replay which ticked and does not end fails
// at the timeout naming who holds it up (or sooner when it cannot end) and
// is released, that fail_all() and stop() release every
// capture, and that forget() returns with the capture no longer touched.
// And the two forms of the tick a capture records: HostStream::replay_tick
// (the kernel form) and ReplayEnd's stores (the default), whose release
// outlasts the reset every replay makes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "collectives/calls.hpp"
#include "collectives/replay_keeper.hpp"
#include "conccl/collectives.hpp"
#include "conccl/emu.hpp"

namespace conccl {
namespace {

// A capture whose "engine" is the test: it ticks (started), ends replays
// (ended_up_to) and can refuse to arm (ready).
struct Scripted final : ReplayKeeper::Replays {
  std::atomic<uint64_t> ticks{0}, ended_up_to{0}, armed_up_to{0}, releases{0};
  std::atomic<bool> ready{true};
  std::mutex mu;
  std::vector<uint64_t> arm_order;
  uint64_t failed_at = 0;
  Status why;

  uint64_t started() const override { return ticks.load(); }
  Result<bool> arm(uint64_t r) override {
    if (!ready) return false;
    std::lock_guard<std::mutex> lk(mu);
    arm_order.push_back(r);
    armed_up_to = r;
    return true;
  }
  bool ended(uint64_t r) override {
    const bool done = r <= ended_up_to.load();
    if (done && r > seen_ended.load()) seen_ended = r;  // the keeper has seen replay r end
    return done;
  }
  std::atomic<uint64_t> seen_ended{0};
  void fail(uint64_t r, const Status& w) override {
    std::lock_guard<std::mutex> lk(mu);
    failed_at = r;
    why = w;
  }
  void release() override { ++releases; }
  Status check(uint64_t r, bool expired) override {
    ++checks;
    if (gone_at && r >= gone_at) return error(Code::unavailable, "rank 1 has left");
    return expired ? error(Code::timeout, "rank 1 has begun " + std::to_string(r - 1) + " replays") : Status();
  }
  std::atomic<uint64_t> checks{0}, gone_at{0};
};

bool eventually(const std::function<bool()>& ok, int ms = 5000) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!ok()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

TEST(ReplayKeeper, ArmsAheadInOrderAndRearmsAsReplaysEnd) {
  Scripted c;
  ReplayKeeper k(ReplayKeeper::Arm::ahead);
  k.add(&c, 5, 4, 60000);  // replays 5.. (the slot's earlier captures ran 4)
  ASSERT_TRUE(eventually([&] { return c.armed_up_to == 8; })) << c.armed_up_to;
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(c.armed_up_to, 8u) << "no more than depth ahead of the last replay that ended";
  // Replays tick and end: the keeper keeps depth armed past the last end.
  for (uint64_t r = 5; r <= 40; ++r) {
    c.ticks = r;
    c.ended_up_to = r;
    ASSERT_TRUE(eventually([&] { return c.armed_up_to == r + 4; })) << r << " " << c.armed_up_to;
  }
  k.forget(&c);  // the thread no longer touches c
  ASSERT_EQ(c.arm_order.size(), 40u);
  for (size_t i = 0; i < c.arm_order.size(); ++i) EXPECT_EQ(c.arm_order[i], 5 + i) << "each replay armed once, in order";
  EXPECT_EQ(c.failed_at, 0u);
  EXPECT_EQ(c.releases, 0u);
  EXPECT_EQ(k.kept(), 0u);
}

// Arming on ticks: nothing goes onto the engines before its replay ticks;
// each replay is armed once its tick is seen, in order, never past depth
// beyond the last that ended; a tick after a pause is still seen at once.
TEST(ReplayKeeper, OnTickArmsEachReplayOnceItTicks) {
  Scripted c;
  c.ticks = 4;  // the slot's earlier captures ran 4 replays
  ReplayKeeper k(ReplayKeeper::Arm::on_tick);
  k.add(&c, 5, 4, 60000);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(c.armed_up_to, 0u) << "replay 5 has not ticked";
  for (uint64_t r = 5; r <= 40; ++r) {
    c.ticks = r;
    ASSERT_TRUE(eventually([&] { return c.armed_up_to == r; })) << r << " " << c.armed_up_to;
    c.ended_up_to = r;
  }
  c.ticks = 50;  // ten replays ticked at once: only depth past the last that ended
  ASSERT_TRUE(eventually([&] { return c.armed_up_to == 44; })) << c.armed_up_to;
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(c.armed_up_to, 44u);
  c.ended_up_to = 50;
  ASSERT_TRUE(eventually([&] { return c.armed_up_to == 50; })) << c.armed_up_to;
  // After a pause longer than the spin the keeper naps; the next tick is
  // still armed within milliseconds.
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  c.ticks = 51;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(eventually([&] { return c.armed_up_to == 51; }));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 50.0);
  k.forget(&c);
  ASSERT_EQ(c.arm_order.size(), 47u);
  for (size_t i = 0; i < c.arm_order.size(); ++i) EXPECT_EQ(c.arm_order[i], 5 + i) << "each replay armed once, in order";
  EXPECT_EQ(c.failed_at, 0u);
}

// CONCCL_KEEPER_TRACE: when the keeper stops, one row per replay with its
// tick seen, its arming and its end in that order, in replay order.
TEST(ReplayKeeper, TraceWritesEachReplaysMomentsInOrder) {
  const std::string prefix = ::testing::TempDir() + "keeper_trace_" + std::to_string(::getpid());
  const std::string path = prefix + "." + std::to_string(::getpid()) + ".csv";
  std::remove(path.c_str());
  setenv("CONCCL_KEEPER_TRACE", prefix.c_str(), 1);
  {
    Scripted c;
    ReplayKeeper k(ReplayKeeper::Arm::on_tick);
    unsetenv("CONCCL_KEEPER_TRACE");  // read when the keeper is made
    k.add(&c, 1, 2, 60000);
    for (uint64_t r = 1; r <= 20; ++r) {
      c.ticks = r;
      ASSERT_TRUE(eventually([&] { return c.armed_up_to == r; })) << r;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      c.ended_up_to = r;
    }
    // Stopped once the keeper has seen the last replay end (a fixed 5 ms was too
    // short for a keeper thread on a loaded machine: the last row had no end).
    ASSERT_TRUE(eventually([&] { return c.seen_ended == 20; }));
    k.stop();
  }
  FILE* f = std::fopen(path.c_str(), "r");
  ASSERT_NE(f, nullptr) << path;
  char line[256];
  ASSERT_NE(std::fgets(line, sizeof line, f), nullptr);
  EXPECT_EQ(std::string(line), "capture,replay,tick_seen_ns,armed_ns,ended_ns\n");
  uint64_t want = 1;
  long long last_tick = 0;
  while (std::fgets(line, sizeof line, f)) {
    char who[64];
    unsigned long long r = 0;
    long long tick = 0, armed = 0, ended = 0;
    ASSERT_EQ(std::sscanf(line, "%63[^,],%llu,%lld,%lld,%lld", who, &r, &tick, &armed, &ended), 5) << line;
    EXPECT_EQ(r, want++) << line;
    EXPECT_GT(tick, last_tick) << line;
    EXPECT_LE(tick, armed) << line;
    EXPECT_LT(armed, ended) << "ended at least 100 us after it was armed: " << line;
    last_tick = tick;
  }
  std::fclose(f);
  EXPECT_EQ(want, 21u) << "a row for each of the 20 replays";
  std::remove(path.c_str());
}

TEST(ReplayKeeper, ATickedReplayThatDoesNotEndFailsAtTheTimeoutAndIsReleased) {
  Scripted c;
  ReplayKeeper k;
  k.add(&c, 1, 2, 300);
  c.ticks = 1;
  c.ended_up_to = 1;
  c.ticks = 2;  // replay 2 ticks and never ends
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(eventually([&] { return c.releases > 0; }));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(ms, 250.0) << "the replay gets its timeout first";
  std::lock_guard<std::mutex> lk(c.mu);
  EXPECT_EQ(c.failed_at, 2u);
  EXPECT_EQ(c.why.code(), Code::timeout) << c.why.to_string();
  EXPECT_NE(c.why.message().find("rank 1 has begun 1 replays"), std::string::npos)
      << "names who holds the replay up: " << c.why.to_string();
  EXPECT_GT(c.checks, 10u) << "checked every few ms while it waited";
}

TEST(ReplayKeeper, AReplayThatCannotEndFailsBeforeTheTimeout) {
  Scripted c;
  ReplayKeeper k;
  k.add(&c, 1, 2, 60000);
  c.gone_at = 2;  // a rank left: replay 2 cannot end
  c.ticks = 1;
  c.ended_up_to = 1;
  c.ticks = 2;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(eventually([&] { return c.releases > 0; }, 10000));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 5000.0) << "not the 60 s timeout";
  std::lock_guard<std::mutex> lk(c.mu);
  EXPECT_EQ(c.failed_at, 2u);
  EXPECT_EQ(c.why.code(), Code::unavailable) << c.why.to_string();
  EXPECT_NE(c.why.message().find("rank 1 has left"), std::string::npos) << c.why.to_string();
}

TEST(ReplayKeeper, ACaptureNotReadyToArmWaitsAndAnIdleOneNeverFails) {
  Scripted c;
  c.ready = false;  // another rank has not captured the call yet
  ReplayKeeper k(ReplayKeeper::Arm::ahead);
  k.add(&c, 1, 3, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(c.armed_up_to, 0u);
  EXPECT_EQ(c.failed_at, 0u) << "no replay ticked: nothing is late";
  c.ready = true;
  ASSERT_TRUE(eventually([&] { return c.armed_up_to == 3; }));
}

TEST(ReplayKeeper, FailAllAndStopReleaseEveryCapture) {
  Scripted a, b, late;
  ReplayKeeper k;
  k.add(&a, 1, 2, 60000);
  k.add(&b, 1, 2, 60000);
  k.fail_all(error(Code::unavailable, "rank 1 failed"));
  ASSERT_TRUE(eventually([&] { return a.releases > 0 && b.releases > 0; }));
  {
    std::lock_guard<std::mutex> lk(a.mu);
    EXPECT_EQ(a.why.message(), "rank 1 failed");
  }
  k.add(&late, 1, 2, 60000);  // added after the failure: failed at once
  ASSERT_TRUE(eventually([&] { return late.releases > 0; }));
  EXPECT_EQ(late.armed_up_to, 0u);

  Scripted c;
  ReplayKeeper k2(ReplayKeeper::Arm::ahead);
  k2.add(&c, 1, 2, 60000);
  ASSERT_TRUE(eventually([&] { return c.armed_up_to == 2; }));
  k2.stop();  // the communicator goes: released, not failed
  EXPECT_GT(c.releases, 0u);
  EXPECT_EQ(c.failed_at, 0u);
  EXPECT_FALSE(k2.running());
  k2.forget(&c);
}

// The step a capture records (StreamOps::ReplayTick) on a HostStream: stop 0
// resets the end word and counts one; stop set only releases the end word.
TEST(ReplayTick, CountsOneAndResetsUnlessStopped) {
  DeviceOptions o;
  o.settings = "preset=small";
  Result<std::unique_ptr<emu::EmuDevice>> dev = emu::create(o);
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  std::vector<Signal> w;
  for (int i = 0; i < 3; ++i) w.push_back(std::move(Signal::create(**dev, -1, 0).value()));
  Signal &counter = w[0], &reset = w[1], &stop = w[2];
  counter.set(41);
  reset.set(7);
  std::unique_ptr<HostStream> s = std::move(HostStream::create(**dev).value());
  const StreamOps::ReplayTick t{counter.va(), reset.va(), stop.va()};
  ASSERT_TRUE(s->begin_capture().ok());
  ASSERT_TRUE(s->replay_tick(t).ok());
  std::unique_ptr<HostStream::Recording> g = std::move(s->end_capture().value());
  EXPECT_EQ(counter.value(), 41u) << "recorded, not run";
  ASSERT_TRUE(g->launch(*s).ok());
  ASSERT_TRUE(s->synchronize(Deadline::after_ms(5000)).ok());
  EXPECT_EQ(counter.value(), 42u);
  EXPECT_EQ(reset.value(), 0u);
  ASSERT_TRUE(g->launch(*s).ok());
  ASSERT_TRUE(s->synchronize(Deadline::after_ms(5000)).ok());
  EXPECT_EQ(counter.value(), 43u);
  stop.set(1);
  ASSERT_TRUE(g->launch(*s).ok());
  ASSERT_TRUE(s->synchronize(Deadline::after_ms(5000)).ok());
  EXPECT_EQ(counter.value(), 43u) << "a stopped capture does not count";
  EXPECT_EQ(reset.value(), 1u) << "...and releases its stream's wait";
  // A word without a host mapping is refused when recorded.
  EXPECT_EQ(s->replay_tick({counter.va(), 0x10, stop.va()}).code(), Code::invalid_argument);
}

// The default tick (ReplayEnd by writes) on a HostStream: a replay stores 0
// in the low half of the end word and 1 at the flag, then waits; the
// keeper's take_tick turns the flag into one count of "posted"; the closing
// list's add ends the replay. Once released, the end word's upper half makes
// every later replay's wait pass although each still resets the low half.
TEST(ReplayTick, ByWritesTheKeeperCountsAndReleaseOutlastsTheReset) {
  if (!ReplayEnd::ticks_by_writes()) GTEST_SKIP() << "CONCCL_REPLAY_TICK=kernel";
  DeviceOptions o;
  o.settings = "preset=h200 memory_per_gpu=64M";
  Result<std::unique_ptr<emu::EmuDevice>> dev = emu::create(o);
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  Result<ReplayEnd> made = ReplayEnd::create(**dev, "test");
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  ReplayEnd end = std::move(made).value();
  Signal posted = std::move(Signal::create(**dev, -1, 0).value());
  posted.set(9);
  end.done.set(5);
  std::unique_ptr<HostStream> s = std::move(HostStream::create(**dev, 20000).value());
  ASSERT_TRUE(s->begin_capture().ok());
  ASSERT_TRUE(end.record(*s, std::make_shared<int>(1), posted, "test").ok());
  std::unique_ptr<HostStream::Recording> g = std::move(s->end_capture().value());
  EXPECT_EQ(g->steps(), 3u) << "reset, flag, wait";
  EXPECT_FALSE(end.take_tick(posted)) << "recorded, not run";
  for (uint64_t replay = 1; replay <= 3; ++replay) {
    ASSERT_TRUE(g->launch(*s).ok());
    const Deadline dl = Deadline::after_ms(5000);
    while (!end.take_tick(posted) && !dl.expired()) std::this_thread::yield();
    EXPECT_EQ(posted.value(), 9 + replay);
    EXPECT_EQ(end.flag.value(), 0u) << "the keeper takes the flag";
    EXPECT_EQ(end.done.value(), 0u) << "the replay reset its end before its flag";
    EXPECT_FALSE(s->synchronize(Deadline::after_ms(30)).ok()) << "the stream waits for the end";
    end.done.add(1);  // the replay's closing list
    ASSERT_TRUE(s->synchronize(Deadline::after_ms(5000)).ok());
  }
  end.release();
  EXPECT_EQ(end.stop.value(), 1u);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(g->launch(*s).ok());
    ASSERT_TRUE(s->synchronize(Deadline::after_ms(5000)).ok()) << "a released capture's replays go on by themselves";
    EXPECT_EQ(end.done.value(), 1ull << 32) << "the reset cleared the low half only";
  }
  EXPECT_EQ(posted.value(), 12u);
  EXPECT_EQ(s->write_value32(end.done.va() + 2, 0).code(), Code::invalid_argument) << "not 4-aligned";
}

}  // namespace
}  // namespace conccl
