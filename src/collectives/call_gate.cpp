// src/collectives/call_gate.cpp - gated submission of window calls
// (calls.hpp, docs/collectives.md "Gated submission"): the lists of call k
// are written into their queues held and published when every rank has
// posted k: by one thread per communicator for stream-ordered calls, by the
// calling thread (which posts, then waits) for host-ordered ones.
//
// Why: each list starts with a wait for every rank's "posted >= k". The
// host queues a call long before the streams get there, so on an engine
// that wait usually fails first. On Hopper a failed semaphore acquire with
// ACQUIRE_SWITCH_TSG (which one process per rank needs, docs/perf run 30)
// switches the channel's TSG out, and the call then waits for the scheduler
// to come back to it. Published only once the wait will pass, a list runs
// as soon as its channel is scheduled.
#include <cstdlib>

#include "collectives/calls.hpp"
#include "util/wait.hpp"
#include "util/env.hpp"
#include "util/thread_name.hpp"

namespace conccl {

bool CallState::gated_submit() {
  static const bool on = util::env_is("CONCCL_GATED_SUBMIT", "1");
  return on;
}

std::chrono::microseconds CallState::gate_spin() {
  static const std::chrono::microseconds us = [] {
    const char* e = std::getenv("CONCCL_GATE_SPIN_US");
    const long v = e ? std::strtol(e, nullptr, 10) : 100;
    return std::chrono::microseconds(v < 0 ? 0 : v > 100000 ? 100000 : v);
  }();
  return us;
}

bool CallState::all_posted(uint64_t call) const {
  for (const Signal& p : posted)
    if (p.value() < call) return false;
  return true;
}

void CallState::hold_gate(Gate g) {
  {
    std::lock_guard<std::mutex> lk(gate_mu);
    gates.push_back(std::move(g));
    if (!gate_thread.joinable()) gate_thread = util::named_thread("conccl-gate", [this] { gate_loop(); });
  }
  gate_cv.notify_one();
}

// Gates open in call order: a gate's spin starts when the one before it has
// opened, so that a burst of calls queued ahead of the streams waits here
// one call at a time, not gate_spin from when it was queued.
void CallState::gate_loop() {
  std::unique_lock<std::mutex> lk(gate_mu);
  while (true) {
    gate_cv.wait(lk, [&] { return gates_stop || !gates.empty(); });
    if (gates.empty()) return;  // stopped with nothing held
    const Gate& g = gates.front();  // stays put: only this thread pops, push_back keeps references
    const bool stopping = gates_stop;
    lk.unlock();
    if (stopping) {
      for (const auto& [q, t] : g.held) q->release(t);
    } else {
      (void)open_gate_here(g);
    }
    lk.lock();
    gates.pop_front();
  }
}

bool CallState::open_gate_here(const Gate& g) {
  bool open = all_posted(g.call);
  if (!open) {
    const auto until = std::chrono::steady_clock::now() + gate_spin();
    uint32_t spins = 0;
    while (!(open = all_posted(g.call))) {
      util::cpu_relax();
      if ((++spins & 63) == 0 && std::chrono::steady_clock::now() >= until) break;
    }
  }
  for (const auto& [q, t] : g.held) q->release(t);
  if (!open) {
    std::lock_guard<std::mutex> lk(mu);
    counts.gates_opened_early++;
  }
  return open;
}

void CallState::stop_gates() {
  {
    std::lock_guard<std::mutex> lk(gate_mu);
    gates_stop = true;
  }
  gate_cv.notify_all();
  if (gate_thread.joinable()) gate_thread.join();
}

}  // namespace conccl
