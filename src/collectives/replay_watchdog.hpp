// src/collectives/replay_watchdog.hpp - one thread that watches the replays
// of every one-process captured call of a communicator (captured_calls.cpp).
//
// A replay's closing list either ends by the call timeout or the replay is
// failed (its stream released, async_error() set). One thread per
// communicator, made at the first replay, serves all its captures: programs
// that capture hundreds of calls (one graph per batch size, several calls
// per layer) would otherwise hold hundreds of sleeping threads. Replays are
// watched in the order they started; one that stalls holds the others'
// checks up to its deadline, which costs nothing, as the first failure
// stops every replay of the communicator anyway.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "conccl/deadline.hpp"
#include "conccl/queue.hpp"
#include "conccl/status.hpp"

namespace conccl {

class ReplayWatchdog {
 public:
  struct Watched {
    const void* owner = nullptr;  // the capture: forget(owner) drops its entries
    Queue* queue = nullptr;       // where the closing list runs
    uint64_t ticket = 0;          // ...and the ticket it ends at
    Deadline deadline = Deadline::now();
    std::function<void(Status)> fail;  // called (on the watchdog thread) when it does not end in time
  };

  ReplayWatchdog() = default;
  ReplayWatchdog(const ReplayWatchdog&) = delete;
  ReplayWatchdog& operator=(const ReplayWatchdog&) = delete;
  ~ReplayWatchdog();  // stops the thread (at most one 250 ms step)

  void watch(Watched w);
  // Drops owner's entries and returns once the thread no longer uses them, so
  // that the owner may free its queue.
  void forget(const void* owner);
  // Entries not yet seen to end (tests).
  size_t watched() const;
  bool running() const;

 private:
  void run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Watched> watched_;
  const void* busy_ = nullptr;  // the owner whose entry the thread is waiting on, unlocked
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace conccl
