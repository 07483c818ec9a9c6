// src/collectives/cached_calls.hpp - Communicator::call for buffers outside
// windows: plans cached by their arguments, launched in turn, and (one
// process per rank) kept the same on every rank by one exchange per call.
//
// The window path (calls.hpp) needs no message per call but needs every
// buffer registered once. This path takes any buffers, as ncclAllGather
// does for unregistered memory, at the price of planning once per distinct
// call and, across processes, two bootstrap exchanges per call (the vote
// below and the launch's barrier). docs/multiprocess.md says which is which.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "conccl/collectives.hpp"

namespace conccl {

struct CachedCalls {
  // Stream-ordered calls keep up to kInFlight plans per argument set, used
  // in turn, so that launches queue on the stream with no host wait between
  // them; at most kInFlight launches are in flight per communicator.
  static constexpr size_t kInFlight = 4;
  // At most kMaxCachedCalls argument sets keep their plans, the least
  // recently used given up first: a caching allocator that hands out ever
  // new buffers would otherwise grow the cache (and its signal memory)
  // without end. Sets with a launch still running are kept.
  static constexpr size_t kMaxCachedCalls = 64;

  explicit CachedCalls(Communicator& c) : comm(c) {}
  ~CachedCalls();  // plans first (each waits for its own launch)

  // With `deferred` (one process, on a stream): the stream's waits for the
  // call are handed back there instead of queued (Plan::enqueue_split);
  // left empty where they were queued (one process per rank).
  Status run(const CollectiveArgs& args, StreamOps* stream, Deadline deadline,
             std::vector<StreamOps::Op>* deferred = nullptr);
  size_t cached_plans() const;

  Communicator& comm;
  uint64_t calls = 0;  // calls made through this path (CommStats::calls)

 private:
  // (op, variant, bytes, root, peer, on a stream, buffers). A buffer is
  // (va, size, backend id, allocation serial): the serial tells memory
  // freed and allocated again at the same address (which other processes
  // may still map as the old allocation) from the buffer the plan was made
  // for.
  using Key = std::tuple<int, int, uint64_t, int, int, bool, std::vector<uint64_t>>;
  struct Slot {
    std::vector<std::unique_ptr<Plan>> plans;
    size_t next = 0;
    // One process per rank: which joint planning made each plan, counted
    // alike on every rank (planning is collective), so ranks can tell that
    // their cached plans are halves of the same one.
    std::map<const Plan*, uint64_t> generation;
    uint64_t last_use = 0;
  };
  Key key_of(const CollectiveArgs& a, bool on_stream) const;
  void touch(const Key& key);
  bool is_in_flight(const Plan* p) const;
  Status run_one_process(const CollectiveArgs& a, StreamOps* stream, Deadline dl,
                         std::vector<StreamOps::Op>* deferred);
  Status run_per_process(const CollectiveArgs& a, StreamOps* stream, Deadline dl);
  Status wait_oldest(Deadline dl, const std::string& name);

  std::map<Key, Slot> cache_;
  uint64_t uses_ = 0;
  uint64_t generations_ = 0;
  // One process per rank: the launches not yet ended for every rank (on a
  // stream, or waited for here only), in call order. Every rank makes the
  // same calls in the same order, so every rank holds the same sequence and
  // ends or waits for its launches in the same order.
  std::deque<Plan*> in_flight_;
};

}  // namespace conccl
