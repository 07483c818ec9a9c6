// src/collectives/calls.hpp - one-call collectives through symmetric windows
// (Communicator::call): the memory every rank shares for them, and the state
// a communicator keeps for them (calls.cpp).
//
// The protocol (docs/multiprocess.md, "Windows"). Every rank numbers its
// calls k = 1, 2, ...; every rank makes the same calls in the same order, so
// k names the same call everywhere and every rank can compute, with no
// message, what every counter below reaches after each call. Per rank, in
// the first kCallAreaBytes of its signal pool, which every rank has mapped:
//   posted   reaches k when the rank has reached call k (its stream's store,
//            after the work queued before the call; or its host)
//   arrive   + 1 per data arrival into the rank (lists of every rank)
//   phase    + 1 per local phase done (swap's ready)
//   sent     + 1 per list of the rank that ended
// Call k's lists (every rank's) wait for every rank's posted >= k before
// they read or write anything; a rank's stream (or host) waits for its
// arrive and sent to reach their value after call k. A rank posts k only
// after its waits for call k - 1, so no list of call k runs while one of
// call k - 1 does, and the counters, which only grow, need no reset.
// A rank also writes a descriptor of each call (op, size, root, windows,
// offsets) before it posts; a rank that finds another rank's descriptor of
// the same k different refuses the call and marks itself failed, with the
// reason, where every rank can read it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/builder.hpp"

namespace conccl {

// Offsets in the call area at the start of each rank's signal pool.
inline constexpr uint64_t kCallPosted = 0;     // Signal (16 bytes)
inline constexpr uint64_t kCallArrive = 16;    // Signal
inline constexpr uint64_t kCallPhase = 32;     // Signal
inline constexpr uint64_t kCallSent = 48;      // Signal
inline constexpr uint64_t kCallFailed = 64;    // uint64: 0, or the call the rank failed at (+1 when before any)
inline constexpr uint64_t kCallPublished = 72; // uint64: calls whose descriptor the rank has written
inline constexpr uint64_t kCallReason = 128;   // why it failed: text, NUL-terminated
inline constexpr uint64_t kCallReasonBytes = 384;
inline constexpr uint64_t kCallDescs = 512;    // ring of call descriptors
inline constexpr uint64_t kCallDescCount = 64;
inline constexpr uint64_t kCallDescBytes = 64;  // 8 uint64 (CallDesc)
inline constexpr uint64_t kCallAreaBytes = 8192;
static_assert(kCallDescs + kCallDescCount * kCallDescBytes <= kCallAreaBytes);

// What every rank must agree on for call k.
struct CallDesc {
  uint64_t k = 0;
  uint64_t op = 0;  // op | variant << 8 | root << 16 | peer << 32
  uint64_t bytes = 0;
  uint64_t send_window = 0, send_offset = 0;  // ~0: none
  uint64_t recv_window = 0, recv_offset = 0;
  uint64_t send_stride = 0;  // all_to_all's (0: packed)
  bool operator==(const CallDesc&) const = default;
  std::string describe() const;
};

struct CallState {
  explicit CallState(Communicator& c);
  ~CallState();  // waits for calls in flight (up to call_timeout_ms), stops the watchdog

  Communicator& comm;
  const int n, me;
  // Each rank's counters, and this rank's own words.
  std::vector<Signal> posted, arrive, phase, sent;
  uint64_t* failed_word(int rank) const;
  uint64_t* published_word(int rank) const;
  char* reason_text(int rank) const;
  uint64_t* desc_slot(int rank, uint64_t k) const;

  // Windows: per window number, every rank's buffer (empty once deregistered).
  struct WindowEntry {
    std::vector<Buffer> ranks;
    uint64_t last_call = 0;  // the last call that used it
  };
  std::vector<WindowEntry> windows;

  // Calls: the last number, each counter's value after it (per rank), the
  // plans by descriptor.
  std::atomic<uint64_t> k{0};
  std::vector<uint64_t> base[kCounters];
  // The stream of the last stream-ordered call, and what it waits for: a
  // call on another stream first waits for those (posted only grows).
  StreamOps* last_stream = nullptr;
  uint64_t last_arrive = 0, last_sent = 0;
  std::map<std::vector<uint64_t>, std::unique_ptr<Plan>> plans;
  CommStats counts;

  // Stream-ordered calls not known complete, watched by the watchdog thread.
  struct Pending {
    uint64_t k = 0, arrive = 0, sent = 0;
    Deadline deadline;
    std::vector<uint64_t> sent_after;  // per rank: its sent counter once its part of call k is done
  };
  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<Pending> pending;
  Status failed;  // the communicator's async error
  bool stop = false;
  std::thread watchdog;

  Status run(const CollectiveArgs& args, StreamOps* stream);
  // Marks the communicator failed (first reason wins), tells the other ranks
  // through this rank's failed word, and releases this rank's stream waits.
  void fail(const Status& why);
  // A failure seen from here: a rank gone, another rank failed, or (at
  // `deadline`) call `call` not done, naming who holds it up.
  // Whether call `call` can still complete here: another rank failed the
  // communicator, or left it before its part of the call was done (a rank
  // whose lists of the call have all ended, per `sent_after`, may leave), or
  // (once `expired`) what it waits for.
  Status check(uint64_t call, uint64_t arrive_target, uint64_t sent_target, bool expired,
               const std::vector<uint64_t>& sent_after) const;
  bool done(uint64_t arrive_target, uint64_t sent_target) const {
    return arrive[static_cast<size_t>(me)].value() >= arrive_target &&
           sent[static_cast<size_t>(me)].value() >= sent_target;
  }
  // Host wait for this rank's part of a call, with the checks between slices.
  Status wait_here(uint64_t call, uint64_t arrive_target, uint64_t sent_target, const std::vector<uint64_t>& sent_after,
                   Deadline deadline);
  void watch();
  void start_watchdog();
};

}  // namespace conccl
