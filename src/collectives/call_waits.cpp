// src/collectives/call_waits.cpp - how window calls end (calls.hpp): a
// host wait for this rank's part with the checks between its slices, the
// failure that every rank sees (a failed word and a reason in each rank's
// call area), and the watchdog that fails a stream-ordered call which
// does not complete within call_timeout_ms (captured calls' replays have
// the keeper: replay_keeper.hpp).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "collectives/calls.hpp"
#include "util/thread_name.hpp"

namespace conccl {

// ---- failures ----

void CallState::fail(const Status& why) {
  keeper.fail_all(why);  // captured calls: their streams released, later ticks only release them
  std::lock_guard<std::mutex> lk(mu);
  if (failed.ok()) {
    failed = why;
    const std::string text = why.to_string();
    if (char* t = reason_text(me)) {
      const size_t len = std::min<size_t>(text.size(), kCallReasonBytes - 1);
      std::memcpy(t, text.data(), len);
      t[len] = 0;
    }
    const uint64_t at = k.load();
    if (uint64_t* f = failed_word(me)) word_store(f, at == 0 ? 1 : at);
  }
  // This rank's stream must not wait forever: its waits are satisfied from
  // the host (the data is not complete; async_error() says so).
  uint64_t a = 0, s = 0;
  for (const Pending& p : pending) {
    a = std::max(a, p.arrive);
    s = std::max(s, p.sent);
  }
  Signal& ma = arrive[static_cast<size_t>(me)];
  Signal& ms = sent[static_cast<size_t>(me)];
  if (ma.valid() && ma.value() < a) ma.set(a);
  if (ms.valid() && ms.value() < s) ms.set(s);
  pending.clear();
  cv.notify_all();
}

Status CallState::check(uint64_t call, uint64_t arrive_target, uint64_t sent_target, bool expired,
                        const std::vector<uint64_t>& sent_after) const {
  const std::string what = "call " + std::to_string(call);
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    const uint64_t* f = failed_word(r);
    if (!f || word_load(f) == 0) continue;
    std::string reason = reason_text(r) ? std::string(reason_text(r), strnlen(reason_text(r), kCallReasonBytes - 1)) : "";
    return error(Code::unavailable, "rank " + std::to_string(r) + " failed the communicator at its call " +
                                        std::to_string(word_load(f)) + " (" + reason + "), so rank " + std::to_string(me) +
                                        "'s " + what + " cannot complete; destroy this communicator");
  }
  if (Bootstrap* b = comm.boot_.get()) {
    std::vector<int> gone = b->hung_up();
    // A rank that reached the call and whose lists of it have all ended
    // brought everything it owes this rank: its leaving fails nothing (it
    // made the call with the host and returned; this rank's own lists need
    // no other rank, and a peer's mapping outlives its process).
    std::erase_if(gone, [&](int g) {
      const size_t gi = static_cast<size_t>(g);
      return gi < sent_after.size() && posted[gi].value() >= call && sent[gi].value() >= sent_after[gi];
    });
    if (!gone.empty()) {
      std::string names;
      for (int r : gone) names += (names.empty() ? "" : ", ") + b->describe_rank(r);
      return error(Code::unavailable, names + (gone.size() == 1 ? " has" : " have") +
                                          " left the communicator (process exited or communicator destroyed) while "
                                          "rank " + std::to_string(me) + "'s " + what +
                                          " was in flight; destroy this communicator and start the group again");
    }
  }
  if (!expired) return Status();
  const std::string limit = " within Options::call_timeout_ms (" + std::to_string(comm.options_.call_timeout_ms) + " ms)";
  std::string late;
  for (int r = 0; r < n; ++r) {
    const uint64_t* p = published_word(r);
    const uint64_t made = p ? word_load(p) : 0;
    if (made < call)
      late += (late.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " has made " +
              std::to_string(made) + " calls";
  }
  if (!late.empty())
    return error(Code::timeout, what + " did not complete" + limit + ": " + late +
                                    " (a rank stopped calling, or runs that far behind; every rank must make the "
                                    "same calls in the same order)");
  for (int r = 0; r < n; ++r)
    if (posted[static_cast<size_t>(r)].value() < call)
      return error(Code::timeout, what + " did not complete" + limit + ": rank " + std::to_string(r) +
                                      (r == me ? " (this rank)" : "") +
                                      " made the call, but its stream has not reached it (the work queued on the "
                                      "stream before the call has not finished)");
  std::string detail = what + " did not complete" + limit + ": rank " + std::to_string(me) + " has " +
                       std::to_string(arrive[static_cast<size_t>(me)].value()) + " of " +
                       std::to_string(arrive_target) + " arrivals (counted over all calls) and " +
                       std::to_string(sent[static_cast<size_t>(me)].value()) + " of " + std::to_string(sent_target) +
                       " of its lists ended";
  return error(Code::timeout, detail);
}

Status CallState::wait_here(uint64_t call, uint64_t arrive_target, uint64_t sent_target,
                            const std::vector<uint64_t>& sent_after, Deadline deadline) {
  const Signal& a = arrive[static_cast<size_t>(me)];
  const Signal& s = sent[static_cast<size_t>(me)];
  while (true) {
    const Deadline slice = Deadline::after(std::min<std::chrono::nanoseconds>(
        std::max<std::chrono::nanoseconds>(deadline.remaining(), std::chrono::nanoseconds(0)), std::chrono::milliseconds(20)));
    Status st = a.wait(arrive_target, slice);
    if (st.ok()) st = s.wait(sent_target, slice);
    if (st.ok()) return Status();
    if (st.code() != Code::timeout) return st;
    Status c = check(call, arrive_target, sent_target, deadline.expired(), sent_after);
    // A rank that finished its part and then left (its process ended) has
    // not failed this call: look at the counters once more.
    if (!c.ok() && done(arrive_target, sent_target)) return Status();
    // Every arrival in: only this rank's own lists are left, and they need
    // no other rank (a peer's mapping outlives its process): wait for them
    // until the deadline.
    if (!c.ok() && arrive[static_cast<size_t>(me)].value() >= arrive_target && !deadline.expired()) continue;
    CONCCL_RETURN_IF_ERROR(c);
  }
}

void CallState::watch() {
  std::unique_lock<std::mutex> lk(mu);
  auto last_check = std::chrono::steady_clock::now();
  // Polls often right after progress, then backs off to 1 ms: a call that
  // takes long costs the thread little.
  std::chrono::microseconds nap{20};
  while (!stop) {
    if (pending.empty()) {
      cv.wait(lk);
      continue;
    }
    const Pending p = pending.front();
    lk.unlock();
    const bool complete = done(p.arrive, p.sent);
    Status st;
    const auto now = std::chrono::steady_clock::now();
    // Completion is polled often; the failure checks (syscalls) less.
    if (!complete && (now - last_check > std::chrono::milliseconds(2) || p.deadline.expired())) {
      last_check = now;
      st = check(p.k, p.arrive, p.sent, p.deadline.expired(), p.sent_after);
    }
    const bool own_part_left = arrive[static_cast<size_t>(me)].value() >= p.arrive && !p.deadline.expired();
    if (!st.ok() && !done(p.arrive, p.sent) && !own_part_left) {  // (a rank that left after its part did not fail it)
      fail(st);
      lk.lock();
      continue;
    }
    if (!st.ok()) {
      lk.lock();
      continue;  // complete after all: popped on the next pass
    }
    lk.lock();
    if (complete) {
      if (!pending.empty() && pending.front().k == p.k) pending.pop_front();
      cv.notify_all();
      nap = std::chrono::microseconds(20);
      continue;
    }
    cv.wait_for(lk, nap);
    nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(1));
  }
}

void CallState::start_watchdog() {
  if (!watchdog.joinable()) watchdog = util::named_thread("conccl-watchdog", [this] { watch(); });
}

}  // namespace conccl
