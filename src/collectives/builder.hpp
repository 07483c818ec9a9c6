// src/collectives/builder.hpp - helpers that turn a collective into lists.
#pragma once

#include <map>

#include "conccl/collectives.hpp"

namespace conccl {

// Ranks in separate processes: timestamp slots each rank reserves per plan
// (one per list of that rank; a rank has a list per engine it uses).
inline constexpr uint64_t kStampSlotsPerRank = 64;

// Window calls: the counters of each rank that lists wait on, as
// PlanList::WaitPatch::counter (their memory: calls.hpp).
inline constexpr uint8_t kCounterPosted = 0;  // the rank reached call k: k
inline constexpr uint8_t kCounterArrive = 1;  // data arrivals into the rank
inline constexpr uint8_t kCounterPhase = 2;   // the rank's local phase done (swap's ready)
inline constexpr uint8_t kCounterSent = 3;    // the rank's lists ended
inline constexpr uint8_t kCounters = 4;

class PlanBuilder {
 public:
  // shared: lists go on the GPU's per-engine queues (QueueSharing).
  PlanBuilder(Communicator& comm, Plan& plan, bool shared) : comm_(comm), plan_(plan), shared_(shared) {}

  // The list for (rank, engine), created (with the trigger gate when the plan
  // is prelaunched) on first use.
  Result<PlanList*> list(int rank, int engine);
  // Copy into rank `dst`'s memory.
  Status copy(PlanList& l, uint64_t dst_va, uint64_t src_va, uint64_t bytes);
  // Advance rank dst's arrival signal by one (after the list's prior packets).
  Status arrive(PlanList& l, int dst);
  // Wait until rank r's arrival signal reaches n (this launch).
  Status wait_arrivals(PlanList& l, int r, uint64_t n);
  Status ready(PlanList& l, int r);                       // ready[r] += 1
  Status wait_ready(PlanList& l, int r, uint64_t n);
  // Wait until s >= rel (this launch); in plans of window calls also
  // recorded as a patch, rewritten per call to base + rel.
  Status wait_on(PlanList& l, const Signal& s, uint8_t counter, int rank, uint64_t rel);

  Communicator& comm() { return comm_; }
  Plan& plan() { return plan_; }

 private:
  Communicator& comm_;
  Plan& plan_;
  bool shared_;
  std::map<std::pair<int, int>, size_t> index_;
};

// Builders, one per op (build_ops.cpp). Arguments are validated already.
Status build_p2p(PlanBuilder& b, const CollectiveArgs& a, Variant v);
Status build_broadcast(PlanBuilder& b, const CollectiveArgs& a, Variant v);
Status build_gather(PlanBuilder& b, const CollectiveArgs& a, Variant v);
Status build_scatter(PlanBuilder& b, const CollectiveArgs& a, Variant v);
Status build_all_gather(PlanBuilder& b, const CollectiveArgs& a, Variant v);
Status build_all_to_all(PlanBuilder& b, const CollectiveArgs& a, Variant v);

// validate.cpp
Status validate_args(const Communicator& comm, const CollectiveArgs& a);

}  // namespace conccl
