// src/util/wait.hpp - the one polling loop behind every deadline wait.
#pragma once

#include <chrono>
#include <thread>

#include "conccl/deadline.hpp"

namespace conccl::util {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Calls pred() until it returns true or the deadline passes: spins briefly
// (completions often land within microseconds), then yields, then sleeps
// with a growing interval capped at 100 us. Returns pred()'s last value.
template <typename Pred>
bool wait_until(Pred&& pred, Deadline deadline) {
  for (int i = 0; i < 256; ++i) {
    if (pred()) return true;
    cpu_relax();
  }
  std::chrono::microseconds sleep{1};
  for (int i = 0;; ++i) {
    if (pred()) return true;
    if (deadline.expired()) return pred();
    if (i < 16) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::min(sleep, std::chrono::duration_cast<std::chrono::microseconds>(
                                                      deadline.remaining()) + std::chrono::microseconds(1)));
      if (sleep < std::chrono::microseconds(100)) sleep *= 2;
    }
  }
}

}  // namespace conccl::util
