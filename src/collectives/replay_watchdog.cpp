// src/collectives/replay_watchdog.cpp - see replay_watchdog.hpp.
#include "collectives/replay_watchdog.hpp"

#include <algorithm>
#include <chrono>

namespace conccl {

ReplayWatchdog::~ReplayWatchdog() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ReplayWatchdog::watch(Watched w) {
  std::lock_guard<std::mutex> lk(mu_);
  watched_.push_back(std::move(w));
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  cv_.notify_all();
}

void ReplayWatchdog::forget(const void* owner) {
  std::unique_lock<std::mutex> lk(mu_);
  watched_.erase(std::remove_if(watched_.begin(), watched_.end(), [&](const Watched& w) { return w.owner == owner; }),
                 watched_.end());
  cv_.wait(lk, [&] { return busy_ != owner; });
}

size_t ReplayWatchdog::watched() const {
  std::lock_guard<std::mutex> lk(mu_);
  return watched_.size();
}

bool ReplayWatchdog::running() const {
  std::lock_guard<std::mutex> lk(mu_);
  return thread_.joinable();
}

// Waits for each watched closing list in turn, in steps of 250 ms: short
// enough that forget() and the destructor need not wait out a stalled
// engine's deadline, long enough that a hung replay's wait_done diagnoses it
// rarely. The entry stays at the front while it is waited on, unlocked;
// forget() of its owner removes it and waits for the step to end.
void ReplayWatchdog::run() {
  std::unique_lock<std::mutex> lk(mu_);
  while (true) {
    cv_.wait(lk, [&] { return stop_ || !watched_.empty(); });
    if (stop_) return;
    const Watched w = watched_.front();
    busy_ = w.owner;
    lk.unlock();
    const Deadline step =
        Deadline::after(std::min<std::chrono::nanoseconds>(std::chrono::milliseconds(250), w.deadline.remaining()));
    const Status st = w.queue->wait_done(step, w.ticket);
    lk.lock();
    // Forgotten meanwhile (the capture is going): nothing of it is touched.
    const bool still = !watched_.empty() && watched_.front().owner == w.owner && watched_.front().ticket == w.ticket &&
                       watched_.front().queue == w.queue;
    if (still && (st.ok() || st.code() != Code::timeout || w.deadline.expired())) {
      watched_.pop_front();
      if (!st.ok()) {
        lk.unlock();
        w.fail(st);  // busy_ still names the owner: forget() waits for this too
        lk.lock();
      }
    }
    busy_ = nullptr;
    cv_.notify_all();
  }
}

}  // namespace conccl
