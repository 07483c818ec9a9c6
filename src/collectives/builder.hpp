// src/collectives/builder.hpp - helpers that turn a collective into lists.
#pragma once

#include <map>
#include <set>

#include "conccl/collectives.hpp"

namespace conccl {

// Ranks in separate processes: timestamp slots each rank reserves per plan
// (one per list of that rank; a rank has a list per engine it uses).
inline constexpr uint64_t kStampSlotsPerRank = 64;

// Plans of at most this many bytes per rank spread ranks that share a GPU
// over its engines (PlanBuilder::engine_for).
inline constexpr uint64_t kSpreadMaxBytes = 64 * 1024;

// Window calls: the counters of each rank that lists wait on, as
// PlanList::WaitPatch::counter (their memory: calls.hpp).
inline constexpr uint8_t kCounterPosted = 0;  // the rank reached call k: k
inline constexpr uint8_t kCounterArrive = 1;  // data arrivals into the rank
inline constexpr uint8_t kCounterPhase = 2;   // the rank's local phase done (swap's ready)
inline constexpr uint8_t kCounterSent = 3;    // the rank's lists ended
inline constexpr uint8_t kCounters = 4;

// All-to-all: bytes from one destination's chunk to the next in a send
// buffer (CollectiveArgs::send_stride, 0 = packed), and how many bytes of
// it the op reads.
inline uint64_t send_step(const CollectiveArgs& a) { return a.send_stride ? a.send_stride : a.bytes; }
inline uint64_t all_to_all_send_bytes(const CollectiveArgs& a, int n) {
  return uint64_t(n - 1) * send_step(a) + a.bytes;
}
inline bool packed_send(const CollectiveArgs& a) { return send_step(a) == a.bytes; }

// A share of one copy: `bytes` from `offset` on `engine`.
struct EngineShare {
  int engine = 0;
  uint64_t offset = 0, bytes = 0;
};
// `bytes` over `engines` in proportion to their weights (EngineInfo::weight:
// PCEs on Hopper), in 256-byte units so shares stay aligned; the last engine
// takes the remainder, and an engine whose share rounds to nothing is left out.
std::vector<EngineShare> split_by_weight(const GpuInfo& g, const std::vector<int>& engines, uint64_t bytes);
// The environment's list-form switches that change how many arrivals a
// rank's buffers expect (docs/collectives.md), in words: every rank of a
// multi-process communicator must see the same (the join compares them).
std::string list_form_digest();
// What a communicator of `ranks` ranks stripes from: Options::stripe_min_bytes,
// or CONCCL_STRIPE_MIN_BYTES where it is unset, else 8 MiB with 8 or more
// ranks, 32 MiB with 2, else 0 (never).
uint64_t stripe_min_bytes(const Communicator::Options& o, int ranks);
// Whether a stream's waits for call `a` may poll (StreamOps::Op::poll): a
// small call, at most kPollMaxBytes moved into each rank (a polling kernel
// holds a GPU thread while the call runs; CONCCL_STREAM_WAITS=kernel,
// docs/collectives.md).
inline constexpr uint64_t kPollMaxBytes = 1 << 20;
bool stream_waits_may_poll(const Communicator& c, const CollectiveArgs& a);
// Whether another process of the communicator uses this rank's GPU
// (StreamOps::Op::shares_gpu); false with every rank in one process.
bool processes_share_gpu(const Communicator& c);

class PlanBuilder {
 public:
  // shared: lists go on the GPU's per-engine queues (QueueSharing).
  PlanBuilder(Communicator& comm, Plan& plan, bool shared);

  // The list for (rank, engine), created (with the trigger gate when the plan
  // is prelaunched) on first use.
  Result<PlanList*> list(int rank, int engine);
  // Copy into rank `dst`'s memory. A copy right after another copy of the
  // same list runs alongside it (CopyOrder::alongside_earlier): the copies
  // of one plan's list never read what another of its copies writes.
  // With folded arrivals (CONCCL_FOLD_ARRIVALS=1, where the engine adds as a
  // copy ends: Caps::copy_add) a copy that names its destination rank waits
  // in the builder for that rank's arrive(), which it then carries itself;
  // anything else recorded on the list first records it as a plain copy.
  Status copy(PlanList& l, uint64_t dst_va, uint64_t src_va, uint64_t bytes, int dst_rank = -1);
  // Records the list's held-back copy: before commands written to l.cb
  // directly (copy_bcst, swap).
  Status settle(PlanList& l);
  // Advance rank dst's arrival signal by one (after the list's prior packets).
  // Arrivals are held back and recorded together (one add per destination,
  // of the count) before the list's next wait or phase signal, or at
  // finish(): a run of adds costs the engine one wait-for-idle where an add
  // after each copy cost one each (docs/perf/h200-collectives.md, run 36).
  // Plans whose lists forward what arrives (chain broadcast) keep one
  // arrival per copy: the next rank's list waits for each.
  Status arrive(PlanList& l, int dst);
  // Records the held-back arrivals of every list; the builder's last step.
  // A list that delivers to one rank only, and is the only list that
  // delivers there, ends with one store of the count instead of an add (in
  // plans that count from zero each launch: not window calls, whose
  // counters only grow): a store is a posted write where an add into host
  // memory is an atomic the engine waits for. A list that delivers to
  // several ranks keeps adds: one wait for idle, then one add each, cost
  // less there than a flushing store each (docs/perf/h200-collectives.md,
  // run 62). CONCCL_SET_ARRIVALS=0 keeps adds everywhere.
  Status finish();
  // Wait until rank r's arrival signal reaches n (this launch).
  Status wait_arrivals(PlanList& l, int r, uint64_t n);
  Status ready(PlanList& l, int r);                       // ready[r] += 1
  Status wait_ready(PlanList& l, int r, uint64_t n);
  // Wait until s >= rel (this launch); in plans of window calls also
  // recorded as a patch, rewritten per call to base + rel.
  Status wait_on(PlanList& l, const Signal& s, uint8_t counter, int rank, uint64_t rel);
  // The same on a word only engines read (in the communicator's signal layout).
  Status wait_on(PlanList& l, uint64_t va, uint8_t counter, int rank, uint64_t rel);

  // The engine of src's list toward dst: Communicator::engine_for (engines
  // by weight, each rank's peers over them), except for small plans whose
  // ranks share a GPU (loopback, one process or one per rank), where each
  // rank's lists go on one engine of its own (spread_engine): at these
  // sizes a list's time is its fixed cost, and the ranks' lists then run on
  // all the engines at once instead of queueing on the heaviest one.
  int engine_for(int src, int dst) const;
  // Where a copy from src into dst goes: one share on engine_for(src, dst);
  // or, with striping (Options::stripe_min_bytes; loopback, every rank on
  // one GPU) for a copy of at least that many bytes, a share on every
  // engine of the GPU by weight, so that the light engines carry their part
  // whatever the number of ranks.
  std::vector<EngineShare> engine_shares(int src, int dst, uint64_t bytes) const;
  Communicator& comm() { return comm_; }
  // How a list waits for its trigger or every rank's "posted"
  // (CONCCL_HOLD_TRIGGERS=1: hold, else yield; CommandBuffer::WaitStyle).
  CommandBuffer::WaitStyle trigger_wait_style() const;
  Plan& plan() { return plan_; }

 private:
  Communicator& comm_;
  Plan& plan_;
  bool shared_;
  bool batch_arrivals_;
  bool spread_;
  bool overlap_copies_;
  bool fold_arrivals_;
  bool set_arrivals_;
  uint64_t stripe_min_bytes_;  // 0: no striping (engine_shares)
  // A list's last copy, not yet recorded, while it may still carry the
  // arrival that follows it.
  struct HeldCopy {
    uint64_t dst, src, bytes;
    CommandBuffer::CopyOrder order;
    int dst_rank;
  };
  std::map<PlanList*, HeldCopy> held_copy_;
  std::map<const PlanList*, size_t> copy_end_;  // where each list's last copy ended (dwords)
  std::map<std::pair<int, int>, size_t> index_;
  // Held-back arrivals per list: (destination rank, count), in first-arrival order.
  std::map<PlanList*, std::vector<std::pair<int, uint64_t>>> held_;
  // (list, rank) pairs for which the list recorded an add to the rank's
  // arrivals before finish(): such a rank keeps adds (finish).
  std::set<std::pair<const PlanList*, int>> added_;
  // Records l's held arrivals: adds, or at finish() (`writers`: how many
  // lists arrive into each rank) a store where finish() says so.
  Status record_held(PlanList& l, const std::vector<int>* writers = nullptr);
};

// Builders, one per op and variant (build_ops.cpp); the variant table
// (variants.cpp) names each. Arguments are validated already.
using BuildFn = Status (*)(PlanBuilder& b, const CollectiveArgs& a);
Status build_p2p_striped(PlanBuilder& b, const CollectiveArgs& a);
Status build_p2p_single(PlanBuilder& b, const CollectiveArgs& a);
Status build_broadcast_fanout(PlanBuilder& b, const CollectiveArgs& a);
Status build_broadcast_bcst(PlanBuilder& b, const CollectiveArgs& a);
Status build_broadcast_chain(PlanBuilder& b, const CollectiveArgs& a);
Status build_gather_pcpy(PlanBuilder& b, const CollectiveArgs& a);
Status build_scatter_fanout(PlanBuilder& b, const CollectiveArgs& a);
Status build_all_gather_pcpy(PlanBuilder& b, const CollectiveArgs& a);
Status build_all_gather_bcst(PlanBuilder& b, const CollectiveArgs& a);
Status build_all_gather_pull(PlanBuilder& b, const CollectiveArgs& a);
Status build_all_gather_b2b(PlanBuilder& b, const CollectiveArgs& a);
Status build_all_to_all_pcpy(PlanBuilder& b, const CollectiveArgs& a);
Status build_all_to_all_b2b(PlanBuilder& b, const CollectiveArgs& a);
Status build_all_to_all_swap(PlanBuilder& b, const CollectiveArgs& a);

// The builder of (op, variant); nullptr for Variant::automatic (resolved
// before planning) or a pair the table lacks (validation refuses those).
BuildFn variant_builder(CollOp op, Variant v);

// validate.cpp
Status validate_args(const Communicator& comm, const CollectiveArgs& a);

}  // namespace conccl
