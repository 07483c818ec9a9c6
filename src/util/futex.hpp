// src/util/futex.hpp - sleep on a 32-bit word with a timeout (Linux futex).
//
// Data always travels through std::atomic; the futex only parks threads, so
// a lost or spurious wake-up costs latency, never correctness.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>

namespace conccl::util {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

// Sleeps while *word == expected, at most `timeout`.
inline void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return;
  timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}

inline void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

// A wake-up channel: bump() after changing state, wait() to sleep until the
// next bump or a timeout. Cheap when nobody sleeps.
class WakeChannel {
 public:
  uint32_t seq() const { return seq_.load(std::memory_order_acquire); }
  void bump() {
    seq_.fetch_add(1);  // seq_cst: pairs with wait()'s sleepers_ increment (Dekker)
    if (sleepers_.load() > 0) futex_wake_all(&seq_);
  }
  // Sleeps unless seq() != seen; returns after a bump, the timeout, or spuriously.
  void wait(uint32_t seen, std::chrono::nanoseconds timeout) {
    sleepers_.fetch_add(1);
    if (seq_.load() == seen) futex_wait(&seq_, seen, timeout);
    sleepers_.fetch_sub(1, std::memory_order_acq_rel);
  }

 private:
  std::atomic<uint32_t> seq_{0};
  std::atomic<uint32_t> sleepers_{0};
};

}  // namespace conccl::util
