// src/collectives/replay_keeper.cpp - see replay_keeper.hpp.
#include "collectives/replay_keeper.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include <sys/prctl.h>

#include <cstdio>

#include "util/env.hpp"
#include "util/thread_name.hpp"

namespace conccl {

namespace {
constexpr std::chrono::microseconds kBusyNap{20};
constexpr std::chrono::microseconds kIdleNap{200};
// Arming on ticks: the longest nap once replays have paused, so that the
// first tick after a pause waits at most this long to be seen.
constexpr std::chrono::microseconds kTickIdleNap{50};
constexpr int64_t kCheckEveryMs = 2;  // Replays::check (syscalls) at most this often per capture
// After this long without a tick, an arm-on-tick keeper backs off from spinning.
constexpr std::chrono::milliseconds kSpinFor{50};

}  // namespace

ReplayKeeper::Arm ReplayKeeper::default_arm() {
  static const Arm arm = util::env_is("CONCCL_REPLAY_ARM", "ahead") ? Arm::ahead : Arm::on_tick;
  return arm;
}

ReplayKeeper::ReplayKeeper(Arm arm) : arm_(arm), trace_to_(util::env_trace_path("CONCCL_KEEPER_TRACE")) {}

ReplayKeeper::~ReplayKeeper() { stop(); }

void ReplayKeeper::trace(const Entry& e, uint64_t r, int64_t TraceRow::*at) {
  if (trace_to_.empty()) return;
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  // Recent rows first: a replay's row is near the end.
  for (size_t i = trace_.size(); i-- > 0 && trace_.size() - i <= 64;)
    if (trace_[i].who == e.who && trace_[i].replay == r) {
      if (trace_[i].*at == 0) trace_[i].*at = ns;
      return;
    }
  if (trace_.size() >= kTraceRows) return;
  TraceRow row{e.who, r, 0, 0, 0};
  row.*at = ns;
  trace_.push_back(row);
}

void ReplayKeeper::write_trace() {
  if (trace_to_.empty() || trace_.empty()) return;
  if (FILE* f = std::fopen(trace_to_.c_str(), "w")) {
    std::fprintf(f, "capture,replay,tick_seen_ns,armed_ns,ended_ns\n");
    for (const TraceRow& t : trace_)
      std::fprintf(f, "%p,%llu,%lld,%lld,%lld\n", static_cast<const void*>(t.who),
                   static_cast<unsigned long long>(t.replay), static_cast<long long>(t.tick_seen),
                   static_cast<long long>(t.armed), static_cast<long long>(t.ended));
    std::fclose(f);
  }
  trace_.clear();
}

void ReplayKeeper::add(Replays* who, uint64_t first, uint64_t depth, int64_t timeout_ms) {
  std::lock_guard<std::mutex> lk(mu_);
  Entry e;
  e.who = who;
  e.armed = e.ended = e.seen = first - 1;
  e.depth = std::max<uint64_t>(depth, 1);
  e.timeout_ms = timeout_ms;
  if (stop_) {  // the communicator is going: nothing is armed
    e.failed = true;
    who->release();
  }
  entries_.push_back(e);
  if (!thread_.joinable() && !stop_) thread_ = util::named_thread("conccl-keeper", [this] { run(); });
  cv_.notify_all();
}

void ReplayKeeper::forget(const Replays* who) {
  std::lock_guard<std::mutex> lk(mu_);  // the thread holds it for a whole pass
  std::erase_if(entries_, [&](const Entry& e) { return e.who == who; });
}

void ReplayKeeper::fail_all(const Status& why) {
  {
    std::lock_guard<std::mutex> lk(why_mu_);
    if (all_why_.ok()) all_why_ = why.ok() ? error(Code::unavailable, "the communicator failed") : why;
  }
  fail_all_.store(true, std::memory_order_release);
  cv_.notify_all();
}

void ReplayKeeper::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lk(mu_);
  for (Entry& e : entries_) {
    e.failed = true;
    e.who->release();
  }
  write_trace();
}

void ReplayKeeper::visit(const std::function<void(Replays&)>& fn) {
  std::lock_guard<std::mutex> lk(mu_);
  for (Entry& e : entries_) fn(*e.who);
}

size_t ReplayKeeper::kept() const {
  std::lock_guard<std::mutex> lk(mu_);
  return entries_.size();
}

ReplayKeeper::Timing ReplayKeeper::timing() const {
  return Timing{replays_.load(std::memory_order_relaxed), busy_ns_.load(std::memory_order_relaxed),
                idle_ns_.load(std::memory_order_relaxed)};
}

bool ReplayKeeper::running() const {
  std::lock_guard<std::mutex> lk(mu_);
  return thread_.joinable() && !stop_;
}

void ReplayKeeper::fail_entry(Entry& e, uint64_t r, const Status& why) {
  e.failed = true;
  e.who->fail(r, why);
  e.who->release();
}

bool ReplayKeeper::tend(Entry& e, std::chrono::steady_clock::time_point now) {
  if (!e.failed && fail_all_.load(std::memory_order_acquire)) {
    Status why;
    {
      std::lock_guard<std::mutex> lk(why_mu_);
      why = all_why_;
    }
    fail_entry(e, e.ended + 1, why);
  }
  if (e.failed) {
    e.who->release();  // a tick that read "stop" just before it was set may have reset the end signal since
    return false;
  }
  if (Status st = e.who->take_ticks(); !st.ok()) {
    fail_entry(e, e.ended + 1, st);
    return false;
  }
  // Timing: a tick seen, then its end.
  auto ns = [](std::chrono::steady_clock::duration d) {
    return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
  };
  // One read of the ticks for the pass: the timing and the arming below
  // then agree on which replays have ticked.
  const uint64_t started = e.who->started();
  if (started > e.seen) {
    if (e.end_at.time_since_epoch().count() != 0) idle_ns_.fetch_add(ns(now - e.end_at), std::memory_order_relaxed);
    for (uint64_t r = e.seen + 1; r <= started; ++r) trace(e, r, &TraceRow::tick_seen);
    e.seen = started;
    e.tick_at = now;
  }
  while (e.ended < e.armed && e.who->ended(e.ended + 1)) {
    ++e.ended;
    trace(e, e.ended, &TraceRow::ended);
    if (e.ended == e.seen && e.tick_at.time_since_epoch().count() != 0) {
      busy_ns_.fetch_add(ns(now - e.tick_at), std::memory_order_relaxed);
      replays_.fetch_add(1, std::memory_order_relaxed);
      e.end_at = now;
    }
  }
  const uint64_t limit = arm_ == Arm::on_tick ? std::min(e.ended + e.depth, started) : e.ended + e.depth;
  while (e.armed < limit) {
    Result<bool> armed = e.who->arm(e.armed + 1);
    if (!armed.ok()) {
      fail_entry(e, e.armed + 1, armed.status());
      return false;
    }
    if (!*armed) break;
    ++e.armed;
    trace(e, e.armed, &TraceRow::armed);
  }
  if (e.who->started() <= e.ended) return false;
  // Replay ended + 1 has ticked: it gets the timeout from when it was seen,
  // and fails sooner when it cannot end.
  if (e.watching != e.ended + 1) {
    e.watching = e.ended + 1;
    e.deadline = Deadline::after_ms(e.timeout_ms);
    e.next_check = Deadline::after_ms(kCheckEveryMs);
    return true;
  }
  const bool expired = e.deadline.expired();
  if (!expired && !e.next_check.expired()) return true;
  e.next_check = Deadline::after_ms(kCheckEveryMs);
  Status st = e.who->check(e.watching, expired);
  if (st.ok() && expired)
    st = error(Code::timeout, "its lists did not end within the call timeout (call_timeout_ms " +
                                  std::to_string(e.timeout_ms) + " ms)");
  if (!st.ok()) fail_entry(e, e.watching, st);
  return true;
}

void ReplayKeeper::run() {
  // Timed waits end within ~1 us of their time instead of Linux's default
  // 50 us timer slack (prctl(2) PR_SET_TIMERSLACK), which would exceed the naps.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  std::unique_lock<std::mutex> lk(mu_);
  std::chrono::microseconds nap = kBusyNap;
  auto last_busy = std::chrono::steady_clock::now();
  while (!stop_) {
    if (entries_.empty()) {
      cv_.wait(lk, [&] { return stop_ || !entries_.empty(); });
      continue;
    }
    bool busy = false;
    const auto now = std::chrono::steady_clock::now();  // one clock read per pass
    for (Entry& e : entries_) busy = tend(e, now) || busy;
    if (busy) last_busy = now;
    // CONCCL_KEEPER_SPIN=1: the ahead form spins too (a measurement: whether
    // re-arming right behind each replay's end helps it).
    static const bool spin_ahead = util::env_is("CONCCL_KEEPER_SPIN", "1");
    if ((arm_ == Arm::on_tick || spin_ahead) && now - last_busy < kSpinFor) {
      // Ticks are seen within microseconds, not a timed wait's ~50 us slack.
      lk.unlock();
      std::this_thread::yield();
      lk.lock();
      continue;
    }
    nap = busy ? kBusyNap : std::min(nap * 2, arm_ == Arm::on_tick ? kTickIdleNap : kIdleNap);
    cv_.wait_for(lk, nap);
  }
}

}  // namespace conccl
